# Keep the encoder layers of a distilled student, in f16, and its config: the embeddings stay the
# base model's (agentrt reads them from all-MiniLM-L6-v2). python3 export.py STUDENT_DIR MODEL_DIR
import json, os, sys
import torch
from safetensors.torch import load_file, save_file
src, dst = sys.argv[1], sys.argv[2]
t = load_file(os.path.join(src, 'model.safetensors'))
layers = {k: v.to(torch.float16).contiguous() for k, v in t.items() if k.startswith('encoder.layer.')}
os.makedirs(dst, exist_ok=True)
save_file(layers, os.path.join(dst, 'model.safetensors'), metadata={'format': 'pt'})
cfg = json.load(open(os.path.join(src, 'config.json')))
keep = ['architectures', 'attention_probs_dropout_prob', 'hidden_act', 'hidden_dropout_prob', 'hidden_size', 'initializer_range',
        'intermediate_size', 'layer_norm_eps', 'max_position_embeddings', 'model_type', 'num_attention_heads', 'num_hidden_layers',
        'pad_token_id', 'position_embedding_type', 'type_vocab_size', 'vocab_size']
json.dump({k: cfg[k] for k in keep if k in cfg}, open(os.path.join(dst, 'config.json'), 'w'), indent=2)
print(len(layers), 'tensors', os.path.getsize(os.path.join(dst, 'model.safetensors')) / 1e6, 'MB')
