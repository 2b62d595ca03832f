r"""RoPE frequencies, pair layouts and rotation (docs/theory.md section 1).

A head's ``d`` real coordinates form ``P = d/2`` complex pairs
:math:`\tilde x_l = x_{\mathrm{re}(l)} + i\,x_{\mathrm{im}(l)}`; position ``m``
rotates pair ``l`` by :math:`m\theta_l`, i.e. :math:`\tilde x_l \mapsto \tilde x_l
e^{i m\theta_l}`.  The layout says which coordinates form a pair:

    half         pair l = (l, l + r/2)        Hugging Face Llama, GPT-NeoX
    interleaved  pair l = (2l, 2l + 1)        RoFormer, GPT-J, Meta's Llama

With partial rotary (``rotary_dim = r < d``) the first ``r`` coordinates
rotate; the remaining ``d - r`` are paired among themselves in the same
layout and carry :math:`\theta = 0`.

>>> import numpy as np
>>> frequencies(8, 100.0).round(3).tolist()
[1.0, 0.316, 0.1, 0.032]
>>> to_pairs(np.arange(8.0), layout="interleaved").tolist()
[1j, (2+3j), (4+5j), (6+7j)]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ropesplit.core.errors import RopesplitError

__all__ = ["LAYOUTS", "SCALINGS", "Scaling", "attention_factor", "check_layout",
           "check_rotary_dim", "frequencies", "from_pairs", "low_half", "pair_coordinates",
           "rotate", "to_pairs"]

LAYOUTS = ("half", "interleaved")


def check_rotary_dim(d: int, rotary_dim: int | None) -> int:
    """Validate ``d`` and ``rotary_dim``; return ``r`` (``d`` when None)."""
    if d <= 0 or d % 2:
        raise RopesplitError(f"head_dim must be even and positive, got {d}")
    r = d if rotary_dim is None else int(rotary_dim)
    if r <= 0 or r % 2 or r > d:
        raise RopesplitError(f"rotary_dim must be even and in (0, {d}], got {rotary_dim}")
    return r


def check_layout(layout: str) -> None:
    """Refuse a pair layout other than ``"half"`` or ``"interleaved"`` with one line."""
    if layout not in LAYOUTS:
        raise RopesplitError(f"layout must be 'half' or 'interleaved', got {layout!r}")


Scaling = Callable[[float, int, Mapping[str, Any]], np.ndarray]  # (base, r, params) -> (r/2,)


def frequencies(
    d: int,
    base: float = 10000.0,
    *,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
) -> np.ndarray:
    r"""Frequencies :math:`\theta_l = b^{-2l/r}` for the ``r/2`` rotating pairs, 0 for the rest.

    .. math:: \theta_l = b^{-2l/r},\ l < r/2;\qquad \theta_l = 0,\ r/2 \le l < d/2

    ``scaling`` (docs/theory.md section 1: scaled RoPE only changes ``theta``; its
    amplitude is :func:`attention_factor`) is a Hugging Face ``rope_parameters`` dict,
    its kind under ``"type"`` or ``"rope_type"``, each computed by its entry of the table
    :data:`SCALINGS` (as transformers' ``ROPE_INIT_FUNCTIONS`` computes them):

    - ``linear``: every :math:`\theta_l` divided by ``factor`` :math:`a`;
    - ``ntk``: the base :math:`b\,a^{r/(r-2)}`;
    - ``dynamic``: the base :math:`b\,(a L / L_0 - (a - 1))^{r/(r-2)}` at
      :math:`L = \max(`\ ``seq_len``, :math:`L_0)`, :math:`L_0` the
      ``max_position_embeddings`` (so the default frequencies up to :math:`L_0`);
    - ``yarn``: :math:`\theta_l / a` on the slow pairs, :math:`\theta_l` on the fast,
      a linear ramp in :math:`l` between the pairs that turn ``beta_slow`` and
      ``beta_fast`` times over ``original_max_position_embeddings`` :math:`L_0`
      (bounds rounded out unless ``truncate`` is false);
    - ``longrope``: :math:`\theta_l / \lambda_l`, :math:`\lambda` the ``long_factor``
      when ``seq_len`` exceeds :math:`L_0`, else the ``short_factor``;
    - ``llama3``: Llama-3's piecewise rule (``low_freq_factor``, ``high_freq_factor``,
      ``original_max_position_embeddings``).

    Where ``factor`` is absent, yarn and longrope take
    ``max_position_embeddings / original_max_position_embeddings``. Returns float64
    ``(d/2,)``.

    >>> frequencies(6, 10000.0, rotary_dim=4).tolist()
    [1.0, 0.01, 0.0]
    >>> frequencies(4, 100.0, scaling={"rope_type": "linear", "factor": 2.0}).tolist()
    [0.5, 0.05]
    """
    r = check_rotary_dim(d, rotary_dim)
    if not np.isfinite(base) or base <= 1.0:
        raise RopesplitError(f"base must be a finite number above 1, got {base}")
    cfg: Mapping[str, Any] = scaling or {}
    kind = _kind(cfg)
    theta = _theta(base, r) if kind is None else SCALINGS[kind](base, r, cfg)  # (r/2,)
    return np.concatenate([theta, np.zeros((d - r) // 2)])  # (d/2,)


def attention_factor(scaling: Mapping[str, Any] | None) -> float:
    r"""The amplitude :math:`a` a scaled RoPE puts on its cos/sin tables (``cos = a
    cos(p\theta)``; the logits scale by :math:`a^2`): ``attention_factor`` when given; else
    for yarn :math:`0.1 \ln a + 1` (or ``mscale``'s ratio
    :math:`(0.1 m \ln a + 1)/(0.1 m' \ln a + 1)` with ``mscale_all_dim`` :math:`m'`),
    for longrope :math:`\sqrt{1 + \ln a / \ln L_0}`, each 1 when :math:`a \le 1`;
    1 for every other kind.

    >>> round(attention_factor({"rope_type": "yarn", "factor": 4.0,
    ...                         "original_max_position_embeddings": 64}), 6)
    1.138629
    """
    cfg: Mapping[str, Any] = scaling or {}
    kind = _kind(cfg)
    if kind not in ("yarn", "longrope"):
        return 1.0
    if cfg.get("attention_factor") is not None:
        return float(cfg["attention_factor"])
    factor = _factor(cfg, kind)
    if factor <= 1.0:
        return 1.0
    if kind == "longrope":
        old = _need(cfg, "original_max_position_embeddings", kind)
        return math.sqrt(1 + math.log(factor) / math.log(old))

    def mscale(m: float) -> float:
        return 0.1 * m * math.log(factor) + 1.0

    m, m_all = cfg.get("mscale"), cfg.get("mscale_all_dim")
    return mscale(m) / mscale(m_all) if m and m_all else mscale(1.0)


def _kind(cfg: Mapping[str, Any]) -> str | None:
    kind = cfg.get("type", cfg.get("rope_type"))
    kind = None if kind in (None, "default") else str(kind)
    if kind is not None and kind not in SCALINGS:
        raise RopesplitError(f"RoPE scaling type must be default or one of {', '.join(SCALINGS)}, "
                             f"got {kind!r}")  # fmt: skip
    return kind


def _need(cfg: Mapping[str, Any], key: str, kind: str | None) -> float:
    if cfg.get(key) is None:
        raise RopesplitError(f"{kind} RoPE scaling needs {key!r}")
    return float(cfg[key])


def _factor(cfg: Mapping[str, Any], kind: str | None) -> float:
    """``factor``; for yarn and longrope without one, the ratio of the context lengths."""
    if cfg.get("factor") is None and kind in ("yarn", "longrope"):
        factor = (_need(cfg, "max_position_embeddings", kind)
                  / _need(cfg, "original_max_position_embeddings", kind))  # fmt: skip
    else:
        factor = float(cfg.get("factor", 1.0))
    if not factor > 0:
        raise RopesplitError(f"scaling factor must be positive, got {factor}")
    return factor


def _theta(base: float, r: int) -> np.ndarray:
    r"""The default frequencies :math:`b^{-2l/r}`, ``(r/2,)``."""
    return base ** -(np.arange(0, r, 2, dtype=np.float64) / r)


def _linear(base: float, r: int, cfg: Mapping[str, Any]) -> np.ndarray:
    """Linear (position interpolation): every frequency divided by ``factor``."""
    return _theta(base, r) / _factor(cfg, "linear")


def _ntk(base: float, r: int, cfg: Mapping[str, Any]) -> np.ndarray:
    """NTK-aware: the base raised by ``factor^(r/(r-2))``."""
    factor = _factor(cfg, "ntk")
    return _theta(base * factor ** (r / (r - 2)) if r > 2 else base, r)


def _dynamic(base: float, r: int, cfg: Mapping[str, Any]) -> np.ndarray:
    """Dynamic NTK: the base raised for ``seq_len`` beyond ``max_position_embeddings``."""
    factor = _factor(cfg, "dynamic")
    limit = float(_need(cfg, "max_position_embeddings", "dynamic"))
    seq = max(float(cfg.get("seq_len") or limit), limit)
    return _theta(base * (factor * seq / limit - (factor - 1)) ** (r / (r - 2)), r)


def _llama3(base: float, r: int, cfg: Mapping[str, Any]) -> np.ndarray:
    """Llama-3 scaling: slow pairs divided by ``factor``, fast kept, smooth in between."""
    factor, theta = _factor(cfg, "llama3"), _theta(base, r)
    low, high = float(cfg.get("low_freq_factor", 1.0)), float(cfg.get("high_freq_factor", 4.0))
    old = float(cfg.get("original_max_position_embeddings", 8192))
    wavelen = 2 * np.pi / theta  # (r/2,)
    smooth = np.clip((old / wavelen - low) / (high - low), 0.0, 1.0)  # 0: slow, 1: fast
    return (1 - smooth) * theta / factor + smooth * theta


def _yarn(base: float, r: int, cfg: Mapping[str, Any]) -> np.ndarray:
    """YaRN: ``theta / factor`` below the ramp (slow pairs), ``theta`` above it (fast)."""
    factor, theta = _factor(cfg, "yarn"), _theta(base, r)
    old = _need(cfg, "original_max_position_embeddings", "yarn")

    def pair_turning(turns: float) -> float:  # the pair index that turns ``turns`` times in old
        return r * math.log(old / (turns * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_turning(cfg.get("beta_fast") or 32), pair_turning(cfg.get("beta_slow") or 1)
    if cfg.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(r // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    return theta / factor * ramp + theta * (1 - ramp)  # (r/2,)


def _longrope(base: float, r: int, cfg: Mapping[str, Any]) -> np.ndarray:
    r"""LongRoPE: :math:`\theta_l / \lambda_l`, ``long_factor`` beyond the original length."""
    theta = _theta(base, r)
    old = _need(cfg, "original_max_position_embeddings", "longrope")
    long = bool(cfg.get("seq_len")) and float(cfg["seq_len"]) > old
    key = "long_factor" if long else "short_factor"
    ext = np.asarray(cfg.get(key, ()), dtype=np.float64).ravel()
    if ext.size != r // 2:
        raise RopesplitError(f"longrope {key} must have {r // 2} entries (one per rotating "
                             f"pair), got {ext.size}")  # fmt: skip
    return theta / ext


# The RoPE types besides the default, a table in the manner of transformers'
# ROPE_INIT_FUNCTIONS: rope_type -> the frequencies (r/2,) from (base, r, parameters).
SCALINGS: dict[str, Scaling] = {
    "linear": _linear,
    "ntk": _ntk,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "longrope": _longrope,
    "llama3": _llama3,
}


def low_half(theta: Any) -> np.ndarray:
    r"""``(P,)`` weights of the low-frequency half of the pairs: 1 on the ``floor(P/2)``
    smallest :math:`\theta_l` (non-rotating pairs lowest, ties in pair order), 1/2 on the
    middle one when ``P`` is odd, 0 elsewhere.

    >>> low_half([1.0, 0.1, 0.0]).tolist()
    [0.0, 0.5, 1.0]
    """
    th = np.asarray(theta, dtype=np.float64).ravel()
    weight = np.zeros(th.size)
    order = np.argsort(th, kind="stable")
    weight[order[: th.size // 2]] = 1.0
    if th.size % 2:
        weight[order[th.size // 2]] = 0.5
    return weight


def pair_coordinates(d: int, r: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates of the real and imaginary part of each pair: two ``(d/2,)`` int arrays."""
    check_layout(layout)
    re, im = [], []
    for start, width in ((0, r), (r, d - r)):
        half = width // 2
        idx = np.arange(half)
        if layout == "half":
            re.append(start + idx)
            im.append(start + half + idx)
        else:
            re.append(start + 2 * idx)
            im.append(start + 2 * idx + 1)
    return np.concatenate(re), np.concatenate(im)


def to_pairs(x: Any, layout: str = "half", rotary_dim: int | None = None) -> np.ndarray:
    r"""``(..., d)`` real -> ``(..., d/2)`` complex128 pairs, rotating pairs first.

    .. math:: \tilde x_l = x_l + i\,x_{l + r/2}\ (\text{half}),\qquad
              \tilde x_l = x_{2l} + i\,x_{2l+1}\ (\text{interleaved})

    >>> to_pairs(np.arange(6.0), rotary_dim=4).tolist()
    [2j, (1+3j), (4+5j)]
    """
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    re, im = (_as_slice(idx) for idx in pair_coordinates(d, check_rotary_dim(d, rotary_dim),
                                                         layout))  # fmt: skip
    z = np.empty(x.shape[:-1] + (d // 2,), dtype=np.complex128)  # (..., P)
    z.real, z.imag = x[..., re], x[..., im]  # copied in place: no complex temporaries
    return z


def from_pairs(z: Any, layout: str = "half", rotary_dim: int | None = None) -> np.ndarray:
    r"""Inverse of :func:`to_pairs`: ``(..., P)`` complex -> ``(..., 2P)`` real float64.

    >>> from_pairs(to_pairs(np.arange(6.0), "interleaved"), "interleaved").tolist()
    [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    """
    z = np.asarray(z, dtype=np.complex128)
    d = 2 * z.shape[-1]
    r = check_rotary_dim(d, rotary_dim)
    re, im = (_as_slice(idx) for idx in pair_coordinates(d, r, layout))
    x = np.empty(z.shape[:-1] + (d,))  # (..., d), C-ordered
    x[..., re] = z.real
    x[..., im] = z.imag
    return x


def _as_slice(idx: np.ndarray) -> slice | np.ndarray:
    """Evenly spaced coordinates (a run, or every other one) as a slice (a strided copy, not
    a gather or a scatter), else as is."""
    step = int(idx[1] - idx[0]) if idx.size > 1 else 1
    if idx.size and step > 0 and np.array_equal(idx, idx[0] + step * np.arange(idx.size)):
        return slice(int(idx[0]), int(idx[0]) + step * idx.size, step)
    return idx


def rotate(
    x: Any,
    positions: Any,
    theta: Any,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
) -> np.ndarray:
    r"""Apply :math:`R(m)` to each vector: ``x (..., N, d)``, ``positions (N,)`` -> ``(..., N, d)``.

    .. math:: \widetilde{(R(m)x)}_l = \tilde x_l\, e^{i m \theta_l}

    >>> rotate(np.array([[1.0, 0.0]]), [np.pi / 2], [1.0]).round(12).tolist()
    [[0.0, 1.0]]
    """
    z = to_pairs(x, layout, rotary_dim)  # (..., N, P)
    m = np.asarray(positions, dtype=np.float64)
    th = np.asarray(theta, dtype=np.float64)
    n, p = z.shape[-2:]
    if m.shape != (n,):
        raise RopesplitError(f"positions must have shape ({n},), got {m.shape}")
    if th.shape != (p,):
        raise RopesplitError(f"theta must have shape ({p},) for head_dim {2 * p}, got {th.shape}")
    return from_pairs(z * np.exp(1j * m[:, None] * th), layout, rotary_dim)
