# Query-like texts to distil a query encoder on: the train split's questions, keyword forms of them,
# page + section headings and short spans of the corpus. No dev question is used (recall is measured on them).
# python3 make_texts.py OUT.txt   (run from the repository root)
import json, random, re, sys
random.seed(0)
STOP = set("a an the of in on at to for from by with and or is was were are be been did do does what which who whom whose when where why how that this these those it its as into than then there their they he she his her him".split())
texts = []
for l in open('data/wiki/questions.jsonl'):
    d = json.loads(l)
    if d['split'] != 'train':
        continue
    q = d['question'].strip()
    texts.append(q)
    words = [w for w in re.findall(r"[\w$%.'-]+", q) if w.lower() not in STOP]
    if len(words) >= 2:
        texts.append(' '.join(words))
n_q = len(texts)
for l in open('data/wiki/pages.jsonl'):
    d = json.loads(l)
    title = d['title']
    heading = title
    for line in d['content'].split('\n'):
        line = line.strip()
        if not line:
            continue
        if line.startswith('#'):
            heading = line.lstrip('#').strip()
            if heading != title and random.random() < 0.5:
                texts.append(f"{title} {heading}")
            continue
        for sent in re.split(r'(?<=[.!?])\s+', line):
            w = sent.split()
            if len(w) < 4 or random.random() > 0.7:
                continue
            k = random.randint(3, min(14, len(w)))
            s = random.randint(0, len(w) - k)
            span = ' '.join(w[s:s + k])
            if random.random() < 0.3:
                span = title + ' ' + span
            texts.append(span)
random.shuffle(texts)
print(f"{n_q} from train questions, {len(texts)} in all", file=sys.stderr)
with open(sys.argv[1], 'w') as f:
    for t in texts:
        f.write(t.replace('\n', ' ') + '\n')
