"""Which CUDA libraries a torch process maps, after a kernel and an NVRTC-compiled one ran.
Run it with and without LD_LIBRARY_PATH=<toolkit>/lib64 to see what that variable changes."""
import os
import torch

x = torch.ones(4, device="cuda")
(x @ x).item()
double = torch.cuda.jiterator._create_jit_fn("template <typename T> T twice(T x) { return x * 2; }")
assert double(x).sum().item() == 8
print("LD_LIBRARY_PATH=%s" % os.environ.get("LD_LIBRARY_PATH", ""))
for lib in sorted({line.split()[-1] for line in open("/proc/self/maps")
                   if any(n in line for n in ("libcudart", "libcublas", "libnvrtc", "libnccl", "libnvJitLink"))}):
    print(lib)
