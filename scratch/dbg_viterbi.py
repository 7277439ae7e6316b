import torch
from tqbuild.kernels import viterbi as V, viterbi_triton as VT
torch.manual_seed(0)
for L, k, T in [(6, 2, 16), (8, 2, 32), (12, 3, 64), (12, 3, 256)]:
    table = V.code_tensor("1mad", L, "cuda")
    x = torch.randn(8, T, device="cuda")
    for fusion in (False, True):
        B = x.shape[0]; J = 2 ** (L - k)
        best = torch.zeros(B, T, J, device="cuda")
        states = torch.empty(B, T, dtype=torch.int64, device="cuda")
        VT._viterbi_pass[(B,)](x, table, best, states, states, T, HAS_OVERLAP=False, L=L, K=k,
                               num_warps=max(1, min(8, 2**L // 512)), enable_fp_fusion=fusion)
        ref = V._pass(x, table, L, k, None)
        # torch forward best values
        C = 2 ** k
        cost = (table.view(1, -1) - x[:, :1]).square().view(B, J, C).transpose(1, 2).contiguous()
        bt = torch.empty(B, T, J, device="cuda")
        for t in range(1, T):
            lo = torch.amin(cost.view(B, C, C, J // C), dim=2)
            bt[:, t] = lo.transpose(1, 2).reshape(B, J)
            nxt = (table.view(J, C).t().contiguous().view(1, C, J) - x[:, t].view(B, 1, 1)).square() + bt[:, t].view(B, 1, J)
            cost = nxt
        diff = (best[:, 1:] - bt[:, 1:]).abs().max().item()
        print(L, k, T, "fusion", fusion, "states equal", torch.equal(states, ref), "best maxdiff", diff,
              "first bad t", int(((best[:, 1:] - bt[:, 1:]).abs().amax((0, 2)) > 0).nonzero()[0]) + 1 if diff > 0 else None)
