#!/usr/bin/env python3
"""The questions file RL from the find SFT start draws from (issue "RL that adds").

Only train questions whose gold answer the find program prints can be won by any answer, so the pool is
drawn from those: the question ids `agentrt trajectories synth --style find` kept (its judge accepted the
answer as printed). Two disjoint splits, both from train articles, neither from dev:

  rlpool    the questions RL draws groups from (small enough that a question comes round again, so the
            unsettled draw's records can pass over the settled ones)
  heldback  the fast check's slice (`run.eval_split`): greedy accuracy on printed questions RL never
            trains on must rise within the first hours of steps
  heldback2 (with --extend --heldback2 N) a second such slice, fresh: once a stage's start was chosen as
            the best checkpoint on `heldback`, that slice flatters the start, and the next stage is judged
            on questions nothing was chosen on
  heldout   (with --extend --heldout-articles K) printed questions of K train articles the stage's pool
            holds none of: the earlier slices share their articles with the pool, so their gain may be the
            articles' facts, while dev's articles are in no pool; this slice foretells dev where they part

Usage: bench/rl_pool.py SYNTH.jsonl QUESTIONS.jsonl OUT.jsonl [--pool 400] [--heldback 150] [--seed 75]
       bench/rl_pool.py SYNTH.jsonl QUESTIONS.jsonl OUT.jsonl --extend IDS.json [--pool 400] [--heldback2 0] [--seed 75]
                        [--heldout-articles K [--heldout 150]]
       bench/rl_pool.py --ids IDS.json QUESTIONS.jsonl OUT.jsonl
The second form grows an earlier campaign's pool when its questions are settled: the earlier rlpool plus
--pool printed questions none of its splits holds, and the very same heldback (so the fast check's curve
goes on comparable); --heldback2 N adds N more fresh ones as the heldback2 split; --heldout-articles K
takes K train articles (seeded) out of the pool, earlier questions and fresh alike, and makes --heldout of
their printed questions the heldout split (the earlier held-back slices stay whole). The third writes the very
splits a campaign's evidence names (its question_ids.json: {"rlpool": [ids], "heldback": [ids]}, maybe
"heldback2": [ids]), for a machine whose cache no longer holds the synthesis.
--ids-out PATH writes the splits drawn as such a question_ids.json, for the campaign's evidence.
The output is written whole to OUT.jsonl.tmp and renamed, so an interrupted run leaves nothing half-written.
"""
import argparse, json, os, random, sys

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("synth", nargs="?"); p.add_argument("questions"); p.add_argument("out")
p.add_argument("--ids", help="a campaign's question_ids.json: write its splits instead of drawing them")
p.add_argument("--pool", type=int, default=400); p.add_argument("--heldback", type=int, default=150)
p.add_argument("--seed", type=int, default=75)
p.add_argument("--extend", help="an earlier campaign's question_ids.json: keep its splits, add --pool fresh rlpool questions")
p.add_argument("--heldback2", type=int, default=0, help="with --extend: this many more fresh questions as a second held-back slice")
p.add_argument("--heldout-articles", type=int, default=0, help="with --extend: this many train articles out of the pool, their printed questions the heldout split")
p.add_argument("--heldout", type=int, default=150, help="with --heldout-articles: the heldout split's size")
p.add_argument("--ids-out", help="write the splits drawn here as a question_ids.json")
a = p.parse_args()
if (a.synth is None) == (a.ids is None):
    sys.exit("give either SYNTH.jsonl (draw the splits) or --ids IDS.json (write a campaign's splits), not both")


def write(rows, splits):
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        for split, chosen in splits:
            for i in sorted(chosen):
                f.write(json.dumps({**rows[i], "split": split}) + "\n")
    os.replace(tmp, a.out)
    if a.ids_out:
        with open(a.ids_out + ".tmp", "w") as f:
            json.dump({split: sorted(chosen) for split, chosen in splits}, f, indent=0)
            f.write("\n")
        os.replace(a.ids_out + ".tmp", a.ids_out)


SPLITS = ["rlpool", "heldback", "heldback2", "heldout"]


def read_splits(path):
    splits = json.load(open(path))
    keys = sorted(splits)
    if not {"rlpool", "heldback"} <= set(keys) or not set(keys) <= set(SPLITS):
        sys.exit(f"{path}: expected the lists rlpool and heldback (and maybe heldback2, heldout); got keys {keys}")
    seen = set()
    for split in SPLITS:
        overlap = seen & set(splits.get(split, []))
        if overlap:
            sys.exit(f"{path}: {len(overlap)} ids of {split} are in an earlier split too (e.g. {sorted(overlap)[0]}): the splits must be disjoint")
        seen |= set(splits.get(split, []))
    return splits


if a.heldback2 and not a.extend:
    sys.exit("--heldback2 draws a second held-back slice beside an earlier stage's splits: it needs --extend")
if a.heldout_articles and not a.extend:
    sys.exit("--heldout-articles takes articles out of an earlier stage's pool: it needs --extend")
if a.ids and a.extend:
    sys.exit("--ids writes a campaign's splits as they are; --extend grows them from SYNTH.jsonl: give one")
if a.ids:
    splits = read_splits(a.ids)
    rows = {}
    for n, line in enumerate(open(a.questions), 1):
        if line.strip():
            q = json.loads(line)
            rows[q["id"]] = q
    for split, ids in splits.items():
        wrong = [i for i in ids if i not in rows or rows[i].get("split") != "train"]
        if wrong:
            sys.exit(f"{a.ids}: {len(wrong)} {split} ids are not train questions of {a.questions} (e.g. {wrong[0]})")
    write(rows, [(split, splits[split]) for split in SPLITS if split in splits])
    print(f"{a.out}: " + " + ".join(f"{len(splits[s])} {s}" for s in SPLITS if s in splits) + f", as {a.ids} names them", file=sys.stderr)
    sys.exit(0)

printed = set()
for n, line in enumerate(open(a.synth), 1):
    if line.strip():
        try:
            printed.add(json.loads(line)["question_id"])
        except (ValueError, KeyError) as e:
            sys.exit(f"{a.synth}:{n}: not a synthesised trajectory with a question_id: {e}")
rows = {}
for n, line in enumerate(open(a.questions), 1):
    if line.strip():
        q = json.loads(line)
        if q.get("split") == "train" and q["id"] in printed:
            rows[q["id"]] = q
missing = printed - rows.keys()
if missing:
    sys.exit(f"{len(missing)} synthesised question ids are not train questions of {a.questions} (e.g. {sorted(missing)[0]})")
ids = sorted(rows)
random.Random(a.seed).shuffle(ids)
if a.extend:
    earlier = read_splits(a.extend)
    unprinted = [i for s in earlier for i in earlier[s] if i not in rows]
    if unprinted:
        sys.exit(f"{a.extend}: {len(unprinted)} of its ids are not printed train questions of {a.synth} (e.g. {unprinted[0]}): not the synthesis it was drawn from")
    taken = {i for s in earlier for i in earlier[s]}
    if a.heldback2 and "heldback2" in earlier:
        sys.exit(f"{a.extend} has a heldback2 already: --heldback2 would replace the slice its stage was judged on")
    if a.heldout_articles and "heldout" in earlier:
        sys.exit(f"{a.extend} has a heldout already: --heldout-articles would replace the slice its stage was judged on")
    # The held-out articles: named by the earlier splits when they hold a heldout, else drawn here.
    pages = sorted({rows[i]["page"] for i in ids})
    if "heldout" in earlier:
        out_pages = {rows[i]["page"] for i in earlier["heldout"]}
    elif a.heldout_articles:
        if a.heldout_articles >= len(pages):
            sys.exit(f"--heldout-articles {a.heldout_articles}: the printed train questions come from {len(pages)} articles; the pool needs some")
        out_pages = set(random.Random(a.seed).sample(pages, a.heldout_articles))
    else:
        out_pages = set()
    pool_earlier = [i for i in earlier["rlpool"] if rows[i]["page"] not in out_pages]
    fresh = [i for i in ids if i not in taken and rows[i]["page"] not in out_pages]
    heldout = earlier.get("heldout") or [i for i in ids if i not in taken and rows[i]["page"] in out_pages][: a.heldout]
    if a.heldout_articles and len(heldout) < a.heldout:
        sys.exit(f"--heldout {a.heldout}: the {a.heldout_articles} held-out articles ({', '.join(sorted(out_pages))}) have only {len(heldout)} printed questions no split holds")
    if a.pool + a.heldback2 > len(fresh):
        sys.exit(f"--pool {a.pool} + --heldback2 {a.heldback2} > the {len(fresh)} printed train questions {a.extend} does not hold")
    splits = [("rlpool", pool_earlier + fresh[: a.pool]), ("heldback", earlier["heldback"])]
    second = earlier.get("heldback2") or fresh[a.pool : a.pool + a.heldback2]
    if second:
        splits.append(("heldback2", second))
    if heldout:
        splits.append(("heldout", heldout))
    write(rows, splits)
    print(f"{a.out}: {len(pool_earlier)} earlier + {a.pool} fresh rlpool, the same {len(earlier['heldback'])} heldback"
          + (f", {len(second)} heldback2" if second else "")
          + (f", {len(heldout)} heldout of the articles {', '.join(sorted(out_pages))} (out of the pool: {len(earlier['rlpool']) - len(pool_earlier)} earlier pool questions)" if heldout else "")
          + f", of {len(ids)} printed train questions (seed {a.seed})", file=sys.stderr)
    sys.exit(0)
if a.pool + a.heldback > len(ids):
    sys.exit(f"--pool {a.pool} + --heldback {a.heldback} > the {len(ids)} printed train questions")
write(rows, [("rlpool", ids[: a.pool]), ("heldback", ids[a.pool : a.pool + a.heldback])])
print(f"{a.out}: {a.pool} rlpool + {a.heldback} heldback of {len(ids)} printed train questions (seed {a.seed})", file=sys.stderr)
