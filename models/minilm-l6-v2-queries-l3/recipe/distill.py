# Distil all-MiniLM-L6-v2 into a shallower encoder for queries: the student starts from some of the
# teacher's layers (embeddings shared and frozen) and learns to put each text where the teacher puts it
# (loss: 1 - cosine of the mean-pooled, normalised vectors).
#
# python3 distill.py TEACHER_DIR TEXTS WORK_DIR LAYERS EPOCHS LR   (run from the repository root)
# e.g. distill.py ~/.cache/agentrt/assets/all-minilm-l6-v2 texts.txt work 0,2,4 5 3e-4
# Writes WORK_DIR/teacher.pt (the teacher's vectors, reused by later runs) and WORK_DIR/student/.
import json, os, random, sys, time
import torch, torch.nn.functional as F
from transformers import BertConfig, BertModel, BertTokenizerFast

TEACHER, TEXTS, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
LAYERS = [int(x) for x in sys.argv[4].split(',')]
EPOCHS, LR = float(sys.argv[5]), float(sys.argv[6])
BATCH = 128
torch.set_num_threads(os.cpu_count() or 2)
torch.manual_seed(0)
random.seed(0)

tok = BertTokenizerFast.from_pretrained(TEACHER)
teacher = BertModel.from_pretrained(TEACHER, add_pooling_layer=False).eval()
config = BertConfig.from_pretrained(TEACHER)
config.num_hidden_layers = len(LAYERS)
student = BertModel(config, add_pooling_layer=False)
start = {}
for k, v in teacher.state_dict().items():
    if k.startswith('encoder.layer.'):
        i = int(k.split('.')[2])
        if i in LAYERS:
            start[k.replace(f'encoder.layer.{i}.', f'encoder.layer.{LAYERS.index(i)}.', 1)] = v
    else:
        start[k] = v
student.load_state_dict(start, strict=False)
for p in student.embeddings.parameters():
    p.requires_grad = False


def embed(model, texts):
    b = tok(texts, padding=True, truncation=True, max_length=64, return_tensors='pt')
    h = model(**b).last_hidden_state
    m = b['attention_mask'].unsqueeze(-1).float()
    return F.normalize((h * m).sum(1) / m.sum(1), dim=-1)


def embed_all(model, texts):
    with torch.no_grad():
        return torch.cat([embed(model, texts[i:i + 256]) for i in range(0, len(texts), 256)])


texts = [l.rstrip('\n') for l in open(TEXTS) if l.strip()]
dev = [q['question'] for q in map(json.loads, open('data/wiki/questions.jsonl')) if q['split'] == 'dev']
held, train = texts[:1000], texts[1000:]
os.makedirs(WORK, exist_ok=True)
cache = os.path.join(WORK, 'teacher.pt')
if os.path.exists(cache):
    teacher_vectors = torch.load(cache)
else:
    teacher_vectors = embed_all(teacher, texts)
    torch.save(teacher_vectors, cache)
held_t, train_t = teacher_vectors[:1000], teacher_vectors[1000:]
dev_t = embed_all(teacher, dev)


def evaluate():
    student.eval()
    ch = (embed_all(student, held) * held_t).sum(-1)
    cd = (embed_all(student, dev) * dev_t).sum(-1)
    student.train()
    return (f'held-out texts cos {ch.mean():.4f} (min {ch.min():.3f}), '
            f'dev questions cos {cd.mean():.4f} (5th percentile {cd.kthvalue(max(1, len(cd) // 20)).values:.3f})')


print('start:', evaluate(), flush=True)
steps = int(EPOCHS * len(train) / BATCH)
opt = torch.optim.AdamW([p for p in student.parameters() if p.requires_grad], lr=LR, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1, (s + 1) / 50) * max(0.0, 1 - s / steps))
order = list(range(len(train)))
student.train()
step, t0 = 0, time.time()
while step < steps:
    # Batches of similar lengths (sorted within chunks of 32 batches), in random order.
    random.shuffle(order)
    chunks = [sorted(order[i:i + BATCH * 32], key=lambda j: len(train[j])) for i in range(0, len(order), BATCH * 32)]
    batches = [c[i:i + BATCH] for c in chunks for i in range(0, len(c), BATCH)]
    random.shuffle(batches)
    for batch in batches:
        if step >= steps:
            break
        s = embed(student, [train[j] for j in batch])
        loss = (1 - (s * train_t[batch]).sum(-1)).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        if step % 100 == 0 or step == steps:
            print(f'step {step}/{steps} loss {loss.item():.4f} {time.time() - t0:.0f}s', flush=True)
        if step % 500 == 0:
            print(evaluate(), flush=True)
print('final:', evaluate(), flush=True)
student.save_pretrained(os.path.join(WORK, 'student'), safe_serialization=True)
