"""cellica's own ICA solver (see :mod:`cellica.transform.ica` for the method): an
orthogonal-constraint, extended-logcosh ICA in float32 torch with Cayley steps and an
L-BFGS direction preconditioned by the approximate Hessian.
"""

from __future__ import annotations

import numpy as np

from cellica.core.logs import get_logger, progress
from cellica.transform.ica import haar_rotation

log = get_logger("ica")


# ---------------------------------------------------------------------- our solver
class _Problem:
    """Contrast, gradient and approximate Hessian of orthogonal ICA on fixed data.

    Besides the two matrix products, the cost of an iteration is the elementwise
    passes over the ``d x n`` rotated data, so each quantity takes one fused pass:
    ``log cosh y = 2 softplus_2(y) - y - log 2`` (softplus with beta 2: exact and
    overflow-free), ``psi = tanh y``, ``E[psi'] = 1 - |psi_i|^2 / n`` (a norm).
    Measured at 384 x 22,062: 58 ms against 189 ms for separate exp/log1p/copysign passes.
    """

    def __init__(self, x, torch):
        self.torch = torch
        self.x = x  # (d, n) float32, rows are features
        self.n = x.shape[1]

    def rotate(self, w):
        return w @ self.x

    def evaluate(self, y):
        """Per-component mean log cosh, and tanh(y) for a later gradient."""
        torch = self.torch
        softplus2 = torch.nn.functional.softplus(y, beta=2).mean(dim=1).double()
        logcosh = 2 * softplus2 - y.mean(dim=1).double() - np.log(2.0)
        return logcosh, torch.tanh(y)

    def grad(self, y, psi, signs):
        """Skew relative gradient, per-component curvature k (>= 0 for the right signs),
        and the sign statistic E[psi'(y)] - E[y psi(y)] (> 0: super-Gaussian)."""
        torch = self.torch
        h = 1 - torch.linalg.vector_norm(psi, dim=1).double() ** 2 / self.n
        g = (psi @ y.T).double() / self.n  # E[psi(y_i) y_j]
        stat = h - torch.diagonal(g)
        g = g * signs[:, None]
        return g - g.T, signs * stat, stat


def _skew_dot(a, b) -> float:
    return float((a * b).sum()) / 2


def _fastica_steps(prob: _Problem, w, steps: int):
    """Symmetric FastICA fixed-point steps (logcosh): fast from a random start, no line search.

    ``W <- E[psi(y) x^T] - diag(E[psi'(y)]) W`` followed by symmetric orthogonalisation.
    """
    torch = prob.torch
    for _ in range(steps):
        y = prob.rotate(w.float())
        psi = torch.tanh(y)
        w_new = (psi @ prob.x.T).double() / prob.n - (1 - psi * psi).mean(dim=1).double()[:, None] * w
        u, _, vt = torch.linalg.svd(w_new)
        w = u @ vt
    return w


def cellica_ica(x: np.ndarray, max_iter: int, tol: float, seed: int, device: str, m: int = 30,
                 lambda_min: float = 1e-2, w0: np.ndarray | None = None,
                 fastica_steps: int = 10, extended: bool = True) -> tuple[np.ndarray, dict]:
    import torch

    dev = torch.device(
        "cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device)
    )
    d = x.shape[1]
    xt = torch.as_tensor(np.ascontiguousarray(x.T, dtype=np.float32), device=dev)
    prob = _Problem(xt, torch)
    w = torch.as_tensor(w0 if w0 is not None else haar_rotation(d, seed), dtype=torch.float64, device=dev)
    if w0 is None and fastica_steps:
        w = _fastica_steps(prob, w, fastica_steps)
    y = prob.rotate(w.float())
    logcosh, psi = prob.evaluate(y)
    signs = torch.ones(d, dtype=torch.float64, device=dev)
    s_mem: list = []
    y_mem: list = []
    r_mem: list = []
    n_iter, gnorm, converged, sign_flips = 0, float("inf"), False, 0
    grad, k, stat = prob.grad(y, psi, signs)
    for n_iter in progress(range(1, max_iter + 1), desc=f"ICA {d} dims", unit="iter"):
        gnorm = float(grad.abs().max())
        if gnorm < tol:
            # Extended rule, applied only at a stationary point: near a random start every
            # component is a near-Gaussian mixture whose sign statistic is noise, and signs
            # chosen there steer the fit to a wrong stationary point (docs/stages.md). Sub-Gaussian
            # components flip and the fit goes on.
            new_signs = torch.where(stat < 0, -1.0, 1.0).to(signs) if extended else signs
            if torch.equal(new_signs, signs):
                converged = True
                break
            sign_flips += int((new_signs != signs).sum())
            signs = new_signs
            s_mem, y_mem, r_mem = [], [], []
            grad, k, _ = prob.grad(y, psi, signs)
            gnorm = float(grad.abs().max())
        loss0 = float((logcosh * signs).sum())
        kmat = (k[:, None] + k[None, :]).clamp(min=lambda_min)
        direction = _lbfgs_direction(grad, kmat, s_mem, y_mem, r_mem)
        if _skew_dot(direction, grad) >= 0:  # not a descent direction: fall back to Newton
            s_mem, y_mem, r_mem = [], [], []
            direction = -grad / kmat
        slope = _skew_dot(direction, grad)
        step, accepted = 1.0, False
        for _ in range(10):
            w_try = _cayley(step * direction) @ w
            y_try = prob.rotate(w_try.float())
            logcosh_try, psi_try = prob.evaluate(y_try)
            if float((logcosh_try * signs).sum()) <= loss0 + 1e-4 * step * slope:
                accepted = True
                break
            step /= 2
        if not accepted:  # tiny step along the preconditioned gradient, memory reset
            s_mem, y_mem, r_mem = [], [], []
            direction = -grad / kmat
            step = 0.1
            w_try = _cayley(step * direction) @ w
            y_try = prob.rotate(w_try.float())
            logcosh_try, psi_try = prob.evaluate(y_try)
        log.debug("iter %d: gradient %.2e, step %.3g, loss %.6f, sub-Gaussian %d", n_iter, gnorm, step, loss0,
                  int((signs < 0).sum()))
        w, y, psi, logcosh = w_try, y_try, psi_try, logcosh_try
        new_grad, k, stat = prob.grad(y, psi, signs)
        s_k, y_k = step * direction, new_grad - grad
        grad = new_grad
        curv = _skew_dot(s_k, y_k)
        if curv > 1e-12:
            s_mem.append(s_k)
            y_mem.append(y_k)
            r_mem.append(1.0 / curv)
            if len(s_mem) > m:
                s_mem.pop(0), y_mem.pop(0), r_mem.pop(0)
    rot = w.cpu().numpy()
    # Re-orthogonalise against accumulated rounding (polar factor).
    u, _, vt = np.linalg.svd(rot)
    return u @ vt, {"n_iter": n_iter, "gradient_norm": gnorm, "converged": converged, "sign_flips": sign_flips,
                    "device": str(dev)}


def _cayley(e):
    """Orthogonal matrix (I - E/2)^-1 (I + E/2) for skew-symmetric E: a second-order
    accurate, much cheaper stand-in for expm(E) as the retraction of each step."""
    import torch

    eye = torch.eye(e.shape[0], dtype=e.dtype, device=e.device)
    return torch.linalg.solve(eye - e / 2, eye + e / 2)


def _lbfgs_direction(grad, kmat, s_mem, y_mem, r_mem):
    q = grad.clone()
    alphas = []
    for s, yv, r in zip(reversed(s_mem), reversed(y_mem), reversed(r_mem), strict=True):
        a = r * _skew_dot(s, q)
        alphas.append(a)
        q = q - a * yv
    z = q / kmat
    for s, yv, r, a in zip(s_mem, y_mem, r_mem, reversed(alphas), strict=True):
        b = r * _skew_dot(yv, z)
        z = z + (a - b) * s
    return -z
