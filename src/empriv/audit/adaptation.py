"""Membership inference against an adapted language model (Paper B, "auditing private adaptations"):
the attacks of the adaptation-audit study on the adaptation data, and the leakage of the base's
pre-training data after adaptation.

Inputs. Every set is either texts (then ``tokenizer`` — an :class:`empriv.models.tokenizer.Tokenizer`,
anything with ``encode_batch``, ``decode`` and ``eos_id`` — and ``seq_len`` are needed) or an
:class:`EncodedTexts` from :func:`encode_texts` (to encode once and score many models). Texts are
encoded as in training (:func:`empriv.models.lm.encode_fixed`: ``[EOS] + tokens`` cut to ``seq_len``);
every real token counts, and a sample's loss L(x|θ) is its mean token NLL. zlib compresses the text
of the scored tokens (the decoded window, not the uncut text). Models are anything
:func:`empriv.models.lm.token_nll` can call: a Hugging Face causal LM, a peft model, or the
:class:`~empriv.models.adaptations.PrefixTunedLM` / :class:`~empriv.models.adaptations.PromptTunedLM`
wrappers (their logits cover the real tokens only).

Attacks (:func:`evaluate_adaptation_mias`; scores from :mod:`empriv.audit.mia`, higher = member):

- ``loss``: −L(x|θ). ``zlib``: −L(x|θ) / zlib length.
- ``min_k``: mean log-probability of the K % least likely tokens, K fixed (``min_k``, from params);
  ``min_k_optimistic``: the K of ``min_k_grid`` with the highest AUC.
- ``reference_pretrained``: −L(x|θ)/L(x|θ₀), the pretrained base θ₀ as reference (Paper B's "more
  realistic" auditor); ``reference_shadow``: the shadow adaptation as reference.
- ``rmia_shadow``: Paper B's Algorithm 1 (offline RMIA on losses, k = 1 reference model: the shadow
  adaptation, trained as the target on disjoint data), Z = the whole ``population`` set, γ and α fixed
  (``rmia_gamma``, ``rmia_alpha``; the paper's γ = 1, α = 0); ``rmia_shadow_optimistic``: the (γ, α) of
  the grid with the highest AUC — what the paper reports. ``rmia_pretrained`` (and ``_optimistic``):
  the same with θ₀ as the reference model.

"Optimistic" entries pick their hyperparameter by the AUC on the very members and non-members they
are evaluated on, so they overstate what an attacker who must fix it beforehand achieves; they carry
``"optimistic": true`` and the chosen value, and their TPRs are those of the AUC-best setting. Each
entry holds ``auc``, ``tpr_at_1pct_fpr``, ``tpr_at_0.1pct_fpr`` (one key per ``fpr_levels`` entry),
``n_members`` and ``n_nonmembers``. A TPR at an FPR below 1/n_nonmembers is the TPR at zero false
positives (``fpr_resolution`` in the result says where that starts).

Results are plain dicts of numbers, booleans and short names (JSON-ready); no text of any set and no
per-sample value enters them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from empriv.audit import mia, roc
from empriv.checks import require_int, require_real

FPR_LEVELS = (0.01, 0.001)
MIN_K_GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
RMIA_GAMMA_GRID = (0.5, 0.75, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2.0)
RMIA_ALPHA_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)


# ----------------------------------------------------------------------------- encoded sets and losses


@dataclass(frozen=True)
class EncodedTexts:
    """Token ids [N, L] (``[EOS] + tokens``, right-padded), the mask of real predicted tokens [N, L]
    (``mask[:, 0]`` is 0) and the bytes zlib compresses for each sample."""

    ids: object  # torch.LongTensor
    mask: object  # torch.FloatTensor
    zlib_bytes: tuple[bytes, ...]

    def __len__(self) -> int:
        return int(self.ids.shape[0])


@dataclass(frozen=True)
class TokenLosses:
    """Per-token NLL [N, T] and the mask of counted tokens [N, T] of one set under one model."""

    nll: np.ndarray
    mask: np.ndarray

    def __len__(self) -> int:
        return int(self.nll.shape[0])

    def mean(self) -> np.ndarray:
        return mia.mean_loss(self.nll, self.mask)


@dataclass(frozen=True)
class SetLosses:
    """Losses of one model on the members, the non-members and (for RMIA) the population Z."""

    members: TokenLosses
    nonmembers: TokenLosses
    population: TokenLosses | None = None

    def evaluated(self) -> TokenLosses:
        """Members then non-members, in one array (the order of the labels)."""
        width = max(self.members.nll.shape[1], self.nonmembers.nll.shape[1])
        a, b = _pad(self.members, width), _pad(self.nonmembers, width)
        return TokenLosses(np.concatenate([a.nll, b.nll]), np.concatenate([a.mask, b.mask]))


def _pad(losses: TokenLosses, width: int) -> TokenLosses:
    extra = width - losses.nll.shape[1]
    if extra == 0:
        return losses
    return TokenLosses(np.pad(losses.nll, ((0, 0), (0, extra))), np.pad(losses.mask, ((0, 0), (0, extra))))


def encode_texts(texts: Sequence[str], tokenizer, seq_len: int) -> EncodedTexts:
    """Encode ``texts`` as training does (``[EOS] + tokens`` cut/padded to ``seq_len``), trimmed to the
    longest sample (right padding: the trim changes no loss)."""
    from empriv.models.lm import encode_fixed

    require_int("seq_len", seq_len, 2)
    if isinstance(texts, str):
        raise ValueError("texts must be a sequence of strings, got one string")
    tokens = tokenizer.encode_batch(list(texts))
    ids, mask = encode_fixed(tokens, tokenizer.eos_id, int(seq_len))
    columns = mask.sum(0).nonzero()
    width = max(2, int(columns.max()) + 1) if len(columns) else 2
    kept = [t[: int(seq_len) - 1] for t in tokens]
    return EncodedTexts(ids[:, :width], mask[:, :width], tuple(tokenizer.decode(t).encode("utf-8") for t in kept))


def _encoded(name: str, texts, tokenizer, seq_len) -> EncodedTexts:
    if isinstance(texts, EncodedTexts):
        out = texts
    else:
        if tokenizer is None or seq_len is None:
            raise ValueError(f"{name} is given as texts: pass tokenizer and seq_len (or an EncodedTexts)")
        out = encode_texts(texts, tokenizer, seq_len)
    if len(out) == 0:
        raise ValueError(f"{name} must hold at least one sample, got 0")
    if (np.asarray(out.mask)[:, 1:].sum(1) == 0).any():
        raise ValueError(f"every sample of {name} needs at least one token after [EOS] (an empty text?)")
    return out


def model_losses(model, encoded: EncodedTexts, batch_size: int = 64) -> TokenLosses:
    """Per-token NLL of ``encoded`` under ``model`` (no grad, eval mode; the mode is restored)."""
    was_training = model.training
    try:
        nll = mia.token_losses(model, encoded.ids, batch_size)
    finally:
        model.train(was_training)
    return TokenLosses(nll, np.asarray(encoded.mask)[:, 1:].astype(bool))


# ----------------------------------------------------------------------------- ROC entries


def fpr_key(level: float) -> str:
    """``0.01`` → ``"tpr_at_1pct_fpr"``, ``0.001`` → ``"tpr_at_0.1pct_fpr"``."""
    return f"tpr_at_{level * 100:g}pct_fpr"


def roc_entry(scores, labels, fpr_levels: Sequence[float] = FPR_LEVELS) -> dict:
    """AUC, TPR at each FPR level and the numbers of members / non-members of one score."""
    labels = np.asarray(labels, dtype=bool)
    out = {"auc": roc.auc(scores, labels)}
    out.update({fpr_key(f): roc.tpr_at_fpr(scores, labels, f) for f in fpr_levels})
    out["n_members"] = int(labels.sum())
    out["n_nonmembers"] = int((~labels).sum())
    return out


def _best(candidates: list[tuple[dict, dict]]) -> tuple[dict, dict]:
    """The (entry, hyperparameters) with the highest AUC (the first of equals)."""
    return max(candidates, key=lambda c: c[0]["auc"])


def _check_fraction(name: str, value) -> float:
    return require_real(name, value, gt=0, le=1)


def _check_grid(name: str, grid, check) -> tuple[float, ...]:
    values = tuple(grid)
    if not values:
        raise ValueError(f"{name} must hold at least one value, got []")
    return tuple(check(f"{name} entry", v) for v in values)


def _positive(name: str, value) -> float:
    return require_real(name, value, gt=0)


def _alpha(name: str, value) -> float:
    return require_real(name, value, ge=0, le=1)


# ----------------------------------------------------------------------------- the attacks on losses


def adaptation_mia_metrics(target: SetLosses, pretrained: SetLosses | None, shadow: SetLosses | None,
                           zlib_bytes: Sequence[bytes] | None, *, min_k: float = 0.2,
                           min_k_grid: Sequence[float] = MIN_K_GRID, rmia_gamma: float = 1.0,
                           rmia_alpha: float = 0.0, rmia_gamma_grid: Sequence[float] = RMIA_GAMMA_GRID,
                           rmia_alpha_grid: Sequence[float] = RMIA_ALPHA_GRID,
                           fpr_levels: Sequence[float] = FPR_LEVELS) -> dict[str, dict]:
    """Every attack of the module docstring from precomputed losses: name → ROC entry.

    ``target``/``pretrained``/``shadow``: losses of each model on the same members, non-members and
    population (RMIA needs ``population`` in the target's and the reference's losses). A ``None``
    reference model skips its attacks; ``zlib_bytes`` (members then non-members) None skips ``zlib``.
    """
    min_k = _check_fraction("min_k", min_k)
    min_k_grid = _check_grid("min_k_grid", min_k_grid, _check_fraction)
    rmia_gamma, rmia_alpha = _positive("rmia_gamma", rmia_gamma), _alpha("rmia_alpha", rmia_alpha)
    gammas = _check_grid("rmia_gamma_grid", rmia_gamma_grid, _positive)
    alphas = _check_grid("rmia_alpha_grid", rmia_alpha_grid, _alpha)
    for f in fpr_levels:
        require_real("fpr_levels entry", f, gt=0, lt=1)

    n_mem, n_non = len(target.members), len(target.nonmembers)
    labels = np.r_[np.ones(n_mem, bool), np.zeros(n_non, bool)]
    ev = target.evaluated()

    def entry(scores, optimistic: bool = False, **params) -> dict:
        return {**roc_entry(scores, labels, fpr_levels), "optimistic": optimistic, **params}

    out: dict[str, dict] = {"loss": entry(mia.loss_score(ev.nll, ev.mask))}
    if zlib_bytes is not None:
        if len(zlib_bytes) != n_mem + n_non:
            raise ValueError(f"zlib_bytes must hold one entry per member and non-member ({n_mem + n_non}), "
                             f"got {len(zlib_bytes)}")
        out["zlib"] = entry(mia.zlib_score(ev.nll, ev.mask, zlib_bytes))
    out["min_k"] = entry(mia.min_k_score(ev.nll, ev.mask, min_k), k=min_k)
    grid = [(entry(mia.min_k_score(ev.nll, ev.mask, k), True, k=k), {"k": k})
            for k in dict.fromkeys((*min_k_grid, min_k))]
    out["min_k_optimistic"] = _best(grid)[0]

    target_x = ev.mean()
    for name, ref in (("pretrained", pretrained), ("shadow", shadow)):
        if ref is None:
            continue
        ref_ev = ref.evaluated()
        if ref_ev.nll.shape != ev.nll.shape or not np.array_equal(ref_ev.mask, ev.mask):
            raise ValueError(f"the {name} losses must be on the target's tokens (same shape and mask)")
        ref_x = mia.mean_loss(ref_ev.nll, ref_ev.mask)
        out[f"reference_{name}"] = entry(mia.reference_score(ev.nll, ev.mask, ref_ev.nll))
        if target.population is None or ref.population is None:
            continue
        target_z, ref_z = target.population.mean(), ref.population.mean()

        def rmia(gamma: float, alpha: float, optimistic: bool = False) -> dict:
            return entry(mia.rmia_score(target_x, ref_x, target_z, ref_z, gamma, alpha), optimistic,
                         gamma=gamma, alpha=alpha, n_population=len(target_z))

        out[f"rmia_{name}"] = rmia(rmia_gamma, rmia_alpha)
        candidates = [(rmia(g, a, True), {}) for g in dict.fromkeys((*gammas, rmia_gamma))
                      for a in dict.fromkeys((*alphas, rmia_alpha))]
        out[f"rmia_{name}_optimistic"] = _best(candidates)[0]
    return out


def _loss_summary(losses: SetLosses) -> dict:
    out = {"members": float(losses.members.mean().mean()), "nonmembers": float(losses.nonmembers.mean().mean())}
    if losses.population is not None:
        out["population"] = float(losses.population.mean().mean())
    return out


# ----------------------------------------------------------------------------- models in, numbers out


def evaluate_adaptation_mias(target, *, members, nonmembers, pretrained, shadow, population, tokenizer=None,
                             seq_len: int | None = None, min_k: float = 0.2, min_k_grid: Sequence[float] = MIN_K_GRID,
                             rmia_gamma: float = 1.0, rmia_alpha: float = 0.0,
                             rmia_gamma_grid: Sequence[float] = RMIA_GAMMA_GRID,
                             rmia_alpha_grid: Sequence[float] = RMIA_ALPHA_GRID,
                             fpr_levels: Sequence[float] = FPR_LEVELS, batch_size: int = 64) -> dict:
    """MIAs against the adapted model ``target`` on its adaptation data (see the module docstring).

    ``members``: the adaptation's training texts (or an :class:`EncodedTexts`); ``nonmembers``: unseen
    texts of the same dataset; ``population``: RMIA's Z, disjoint from both; ``pretrained``: the base
    before adaptation; ``shadow``: the shadow adaptation (trained like the target on disjoint data), or
    None (its attacks are then left out). Returns ``{"n_members", "n_nonmembers", "n_population",
    "fpr_resolution", "mia": {name: entry}, "mean_loss": {model: {set: mean NLL}}}``.
    """
    require_int("batch_size", batch_size, 1)
    if pretrained is None:
        raise ValueError("pretrained must be the base model before adaptation, got None")
    mem = _encoded("members", members, tokenizer, seq_len)
    non = _encoded("nonmembers", nonmembers, tokenizer, seq_len)
    pop = _encoded("population", population, tokenizer, seq_len)

    def losses(model) -> SetLosses:
        return SetLosses(model_losses(model, mem, batch_size), model_losses(model, non, batch_size),
                         model_losses(model, pop, batch_size))

    models = {"target": target, "pretrained": pretrained, **({"shadow": shadow} if shadow is not None else {})}
    all_losses = {name: losses(model) for name, model in models.items()}
    entries = adaptation_mia_metrics(
        all_losses["target"], all_losses["pretrained"], all_losses.get("shadow"),
        mem.zlib_bytes + non.zlib_bytes, min_k=min_k, min_k_grid=min_k_grid, rmia_gamma=rmia_gamma,
        rmia_alpha=rmia_alpha, rmia_gamma_grid=rmia_gamma_grid, rmia_alpha_grid=rmia_alpha_grid,
        fpr_levels=fpr_levels)
    return {
        "n_members": len(mem),
        "n_nonmembers": len(non),
        "n_population": len(pop),
        "fpr_resolution": 1.0 / len(non),
        "mia": entries,
        "mean_loss": {name: _loss_summary(v) for name, v in all_losses.items()},
    }


def pretraining_leakage(base, adapted, members, nonmembers, *, tokenizer=None, seq_len: int | None = None,
                        reference=None, fpr_levels: Sequence[float] = FPR_LEVELS, batch_size: int = 64) -> dict:
    """Membership of the base's pre-training data before and after adaptation (Paper B's
    post-adaptation audit of pre-training, with the loss attack instead of extraction).

    ``members``: texts the base was pre-trained on; ``nonmembers``: unseen texts of the same family.
    The ``loss`` and ``zlib`` attacks run under ``base`` and under ``adapted``; with a ``reference``
    model (one not trained on the pre-training data) also ``reference``. ``difference`` is adapted −
    base for each AUC (negative: the adaptation hid part of what pre-training leaked).
    """
    require_int("batch_size", batch_size, 1)
    mem = _encoded("members", members, tokenizer, seq_len)
    non = _encoded("nonmembers", nonmembers, tokenizer, seq_len)
    labels = np.r_[np.ones(len(mem), bool), np.zeros(len(non), bool)]
    zlib_bytes = mem.zlib_bytes + non.zlib_bytes

    def losses(model) -> SetLosses:
        return SetLosses(model_losses(model, mem, batch_size), model_losses(model, non, batch_size))

    ref = losses(reference).evaluated() if reference is not None else None
    out: dict = {"n_members": len(mem), "n_nonmembers": len(non), "fpr_resolution": 1.0 / len(non)}
    mean_loss = {}
    for name, model in (("base", base), ("adapted", adapted)):
        sl = losses(model)
        ev = sl.evaluated()
        attacks = {"loss": roc_entry(mia.loss_score(ev.nll, ev.mask), labels, fpr_levels),
                   "zlib": roc_entry(mia.zlib_score(ev.nll, ev.mask, zlib_bytes), labels, fpr_levels)}
        if ref is not None:
            attacks["reference"] = roc_entry(mia.reference_score(ev.nll, ev.mask, ref.nll), labels, fpr_levels)
        out[name] = attacks
        mean_loss[name] = _loss_summary(sl)
    out["difference"] = {f"{attack}_auc": out["adapted"][attack]["auc"] - out["base"][attack]["auc"]
                         for attack in out["base"]}
    out["mean_loss"] = mean_loss
    return out
