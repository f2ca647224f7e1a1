"""empriv.audit.adaptation: the adaptation-audit MIAs on hand-made losses (known AUCs, TPRs, Algorithm 1
by hand and against a literal loop), then end to end on a tiny GPT-2: full fine-tuning leaks, the
untouched base does not, and the same call scores prefix-, prompt- and LoRA-adapted models."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from empriv.audit import adaptation as ad
from empriv.audit.roc import auc
from tiny_models import tiny_gpt2


def one_token(values) -> ad.TokenLosses:
    v = np.asarray(values, dtype=float).reshape(-1, 1)
    return ad.TokenLosses(v, np.ones_like(v, bool))


def set_losses(members, nonmembers, population=None) -> ad.SetLosses:
    return ad.SetLosses(one_token(members), one_token(nonmembers), None if population is None else one_token(population))


# ----------------------------------------------------------------------------- ROC entries


def test_roc_entry_separated_identical_and_hand_made_tpr():
    labels = np.r_[np.ones(50, bool), np.zeros(50, bool)]
    e = ad.roc_entry(np.r_[np.arange(50) + 100.0, np.arange(50)], labels)
    assert e == {"auc": 1.0, "tpr_at_1pct_fpr": 1.0, "tpr_at_0.1pct_fpr": 1.0, "n_members": 50, "n_nonmembers": 50}
    # same distribution, 2,000 each: the null AUC has sd sqrt(4001/(12*2000^2)) = 0.0091; tolerance 0.03 (3.3 sd)
    rng = np.random.default_rng(0)
    same = ad.roc_entry(rng.normal(size=4000), np.r_[np.ones(2000, bool), np.zeros(2000, bool)])
    assert abs(same["auc"] - 0.5) < 0.03
    # 100 non-members score 0..99; of 10 members three beat every non-member (FPR 0) and a fourth
    # beats all but one (FPR 1/100): TPR 0.3 at 0.1 % FPR, 0.4 at 1 % FPR
    members = np.array([150, 120, 99.5, 98.5, 50, 10, 5, 3, 2, 1.0])
    e = ad.roc_entry(np.r_[members, np.arange(100.0)], np.r_[np.ones(10, bool), np.zeros(100, bool)])
    assert e["tpr_at_0.1pct_fpr"] == 0.3 and e["tpr_at_1pct_fpr"] == 0.4
    assert (e["n_members"], e["n_nonmembers"]) == (10, 100)
    assert ad.fpr_key(0.05) == "tpr_at_5pct_fpr"


# ----------------------------------------------------------------------------- attacks on hand-made losses


def test_rmia_algorithm_1_loss_and_reference_by_hand():
    # α = 0: L'(x) = (L_shadow(x) + 1)/2, ratio = L_target / L'
    #   members     target [0.5, 1.0], shadow [2.0, 1.0] -> L' [1.5, 1.0]  -> ratios [1/3, 1]
    #   non-members target [2.0, 1.5], shadow [2.0, 0.5] -> L' [1.5, 0.75] -> ratios [4/3, 2]
    #   population  target [1, 2, 3, 1], shadow [1, 3, 1, 3] -> L' [1, 2, 1, 2] -> ratios [1, 1, 3, 0.5]
    # γ = 1: score = #{z: ratio_x < ratio_z}/4 = members [1, 1/4], non-members [1/4, 1/4] -> AUC (2 + ½·2)/4 = 0.75
    # γ = 2: #{z: ratio_x < 2·ratio_z} -> members [1, 3/4], non-members [3/4, 1/4] -> AUC (2 + ½ + 1)/4 = 0.875
    target = set_losses([0.5, 1.0], [2.0, 1.5], [1, 2, 3, 1])
    shadow = set_losses([2.0, 1.0], [2.0, 0.5], [1, 3, 1, 3])
    out = ad.adaptation_mia_metrics(target, None, shadow, None, rmia_gamma_grid=(1.0, 2.0), rmia_alpha_grid=(0.0,))
    assert out["rmia_shadow"]["auc"] == 0.75
    assert (out["rmia_shadow"]["gamma"], out["rmia_shadow"]["alpha"], out["rmia_shadow"]["optimistic"]) == (1.0, 0.0, False)
    best = out["rmia_shadow_optimistic"]
    assert (best["auc"], best["gamma"], best["optimistic"], best["n_population"]) == (0.875, 2.0, True, 4)
    assert out["loss"]["auc"] == 1.0
    # reference: -target/shadow = members [-0.25, -1], non-members [-1, -3] -> AUC (2 + ½ + 1)/4
    assert out["reference_shadow"]["auc"] == 0.875
    assert "zlib" not in out and "reference_pretrained" not in out and "rmia_pretrained" not in out


def naive_algorithm_1(target_x, ref_x, target_z, ref_z, gamma, alpha):
    """Paper B's Algorithm 1, line by line, k = 1."""
    scores = []
    for lx, rx in zip(target_x, ref_x):
        c = 0
        ratio_x = lx / (0.5 * ((1 + alpha) * rx + (1 - alpha)))
        for lz, rz in zip(target_z, ref_z):
            ratio_z = lz / (0.5 * ((1 + alpha) * rz + (1 - alpha)))
            if ratio_x / ratio_z < gamma:
                c += 1
        scores.append(c / len(target_z))
    return np.array(scores)


def test_rmia_entries_match_a_literal_algorithm_1_over_the_grid():
    rng = np.random.default_rng(1)
    ref = {k: rng.uniform(1, 4, n) for k, n in (("m", 30), ("n", 40), ("z", 25))}
    tgt = {k: np.clip(v + rng.normal(0, 0.3, len(v)) - (0.4 if k == "m" else 0.0), 0.05, None) for k, v in ref.items()}
    target = set_losses(tgt["m"], tgt["n"], tgt["z"])
    pretrained = set_losses(ref["m"], ref["n"], ref["z"])
    labels = np.r_[np.ones(30, bool), np.zeros(40, bool)]
    x_t, x_r = np.r_[tgt["m"], tgt["n"]], np.r_[ref["m"], ref["n"]]
    gammas, alphas = (0.8, 1.0, 1.3), (0.0, 0.5, 1.0)
    out = ad.adaptation_mia_metrics(target, pretrained, None, None, rmia_gamma=1.3, rmia_alpha=0.5,
                                    rmia_gamma_grid=gammas, rmia_alpha_grid=alphas)
    fixed = naive_algorithm_1(x_t, x_r, tgt["z"], ref["z"], 1.3, 0.5)
    assert out["rmia_pretrained"]["auc"] == pytest.approx(auc(fixed, labels), abs=1e-12)
    grid = {(g, a): auc(naive_algorithm_1(x_t, x_r, tgt["z"], ref["z"], g, a), labels) for g in gammas for a in alphas}
    assert out["rmia_pretrained_optimistic"]["auc"] == pytest.approx(max(grid.values()), abs=1e-12)
    chosen = (out["rmia_pretrained_optimistic"]["gamma"], out["rmia_pretrained_optimistic"]["alpha"])
    assert grid[chosen] == pytest.approx(max(grid.values()), abs=1e-12)
    assert out["rmia_pretrained"]["auc"] > 0.65  # members were made 0.4 nats easier (measured 0.71)


def test_min_k_fixed_and_optimistic_over_the_grid():
    # members: one easy and one hard token (mean 1.55, 1.65); non-members: two middling tokens (2.05, 2.25).
    # K = 50 % keeps only the hardest token (members 3.0/3.2 vs 2.1/2.3): AUC 0; K = 100 % is the mean: AUC 1.
    nll = np.array([[0.1, 3.0], [0.1, 3.2], [2.0, 2.1], [2.2, 2.3]])
    mask = np.ones_like(nll, bool)
    target = ad.SetLosses(ad.TokenLosses(nll[:2], mask[:2]), ad.TokenLosses(nll[2:], mask[2:]))
    out = ad.adaptation_mia_metrics(target, None, None, [b"ab", b"cd", b"ef", b"gh"], min_k=0.5, min_k_grid=(0.5, 1.0))
    assert (out["min_k"]["auc"], out["min_k"]["k"], out["min_k"]["optimistic"]) == (0.0, 0.5, False)
    assert (out["min_k_optimistic"]["auc"], out["min_k_optimistic"]["k"], out["min_k_optimistic"]["optimistic"]) == (1.0, 1.0, True)
    assert out["zlib"]["auc"] == 1.0  # equal zlib lengths: the loss order
    assert "rmia_shadow" not in out  # no reference model, no population


@pytest.mark.parametrize("kwargs, message", [
    ({"rmia_gamma": 0}, r"rmia_gamma: out of range \(got 0; allowed: a finite number > 0\)"),
    ({"rmia_alpha": 1.5}, r"rmia_alpha: out of range \(got 1.5; allowed: a finite number in \[0, 1\]\)"),
    ({"min_k": 0}, r"min_k: out of range \(got 0; allowed: a finite number in \(0, 1\]\)"),
    ({"min_k_grid": ()}, "min_k_grid must hold at least one value, got"),
    ({"rmia_gamma_grid": (1.0, -1.0)},
     r"rmia_gamma_grid entry: out of range \(got -1.0; allowed: a finite number > 0\)"),
    ({"fpr_levels": (0.0,)}, r"fpr_levels entry: out of range \(got 0.0; allowed: a finite number in \(0, 1\)\)"),
])
def test_bad_hyperparameters_are_one_line_errors(kwargs, message):
    target = set_losses([1.0], [2.0], [1.5])
    with pytest.raises(ValueError, match=message):
        ad.adaptation_mia_metrics(target, target, None, None, **kwargs)


def test_mismatched_inputs_are_errors():
    target = set_losses([1.0, 2.0], [2.0], [1.5])
    with pytest.raises(ValueError, match=r"zlib_bytes must hold one entry per member and non-member \(3\), got 1"):
        ad.adaptation_mia_metrics(target, None, None, [b"x"])
    with pytest.raises(ValueError, match="the shadow losses must be on the target's tokens"):
        ad.adaptation_mia_metrics(target, None, set_losses([1.0], [2.0], [1.5]), None)
    with pytest.raises(ValueError, match="members is given as texts: pass tokenizer and seq_len"):
        ad.evaluate_adaptation_mias(None, members=["a"], nonmembers=["b"], pretrained=object(), shadow=None,
                                    population=["c"])
    with pytest.raises(ValueError, match="pretrained must be the base model before adaptation, got None"):
        ad.evaluate_adaptation_mias(None, members=["a"], nonmembers=["b"], pretrained=None, shadow=None,
                                    population=["c"])


# ----------------------------------------------------------------------------- end to end on a tiny GPT-2

SEQ = 32
N = 64


def finetune(model, tokenizer, texts, steps: int, lr: float) -> float:
    """Full-batch non-private Adam on ``texts`` (the trainable parameters only); returns the last loss."""
    from empriv.models.lm import encode_fixed, per_sample_mean_nll

    ids, mask = encode_fixed(tokenizer.encode_batch(list(texts)), tokenizer.eos_id, SEQ)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        loss = per_sample_mean_nll(model, ids, mask).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return float(loss.detach())


@pytest.fixture(scope="module")
def study():
    """A tokenizer and a 2-layer GPT-2 pre-trained on 96 public texts; the study's sets (64 per role)."""
    from empriv.data.adaptation_sets import build_adaptation_sets
    from empriv.data.synthetic import generate_public
    from empriv.models.tokenizer import train_bpe

    public = [e.text for e in generate_public(96, 0)]
    tokenizer = train_bpe(public, 512)
    sets = build_adaptation_sets(public, n_members=N, n_nonmembers=N, n_shadow=N, n_population=N,
                                 n_probe_members=48, n_probe_nonmembers=48, seed=1)
    base = tiny_gpt2(vocab_size=tokenizer.vocab_size, n_embd=32, n_head=2, n_layer=2, n_positions=48)
    finetune(base, tokenizer, public, 60, 1e-2)
    return {"public": public, "tokenizer": tokenizer, "sets": sets, "base": base}


@pytest.fixture(scope="module")
def full_finetuned(study):
    """A full fine-tune of the base on the iid members and its shadow on the iid shadow set (non-private)."""
    tok, split = study["tokenizer"], study["sets"].iid
    target, shadow = copy.deepcopy(study["base"]), copy.deepcopy(study["base"])
    finetune(target, tok, split.members, 100, 1e-2)
    finetune(shadow, tok, split.shadow, 100, 1e-2)
    return target, shadow


def test_encode_texts_cuts_trims_and_compresses_the_scored_window(study):
    tok = study["tokenizer"]
    long_text, short_text = study["public"][0] * 3, "Hi Theo"
    enc = ad.encode_texts([long_text, short_text], tok, SEQ)
    tokens = tok.encode(long_text)
    assert len(tokens) > SEQ and enc.ids.shape == (2, SEQ) and enc.ids[0].tolist() == [tok.eos_id, *tokens[: SEQ - 1]]
    assert enc.zlib_bytes[0] == tok.decode(tokens[: SEQ - 1]).encode() and enc.zlib_bytes[1] == b"Hi Theo"
    short = ad.encode_texts([short_text], tok, SEQ)
    n = len(tok.encode(short_text))
    assert short.ids.shape == (1, n + 1) and short.mask.tolist() == [[0.0] + [1.0] * n]  # trimmed to the text
    with pytest.raises(ValueError, match=r"every sample of nonmembers needs at least one token after \[EOS\]"):
        ad.evaluate_adaptation_mias(study["base"], members=[short_text], nonmembers=[""], pretrained=study["base"],
                                    shadow=None, population=[short_text], tokenizer=tok, seq_len=SEQ)
    with pytest.raises(ValueError, match=r"seq_len: out of range \(got 1; allowed: an integer >= 2\)"):
        ad.encode_texts([short_text], tok, 1)


def _all_texts(sets):
    return [t for texts in sets.named_sets().values() for t in texts]


def _assert_no_text(result, texts):
    dumped = json.dumps(result, allow_nan=False)
    assert not any(t[:24] in dumped for t in texts)


def _assert_optimistic_at_least_fixed(mia):
    for name, entry in mia.items():
        if name.endswith("_optimistic"):
            assert entry["optimistic"] and entry["auc"] >= mia[name[: -len("_optimistic")]]["auc"] - 1e-12
        else:
            assert entry["optimistic"] is False


def test_full_finetune_leaks_its_members(study, full_finetuned):
    target, shadow = full_finetuned
    split, tok = study["sets"].iid, study["tokenizer"]
    r = ad.evaluate_adaptation_mias(target, members=split.members, nonmembers=split.nonmembers,
                                    pretrained=study["base"], shadow=shadow, population=split.population,
                                    tokenizer=tok, seq_len=SEQ)
    mia = r["mia"]
    assert set(mia) == {"loss", "zlib", "min_k", "min_k_optimistic", "reference_pretrained", "reference_shadow",
                        "rmia_pretrained", "rmia_pretrained_optimistic", "rmia_shadow", "rmia_shadow_optimistic"}
    assert (r["n_members"], r["n_nonmembers"], r["n_population"]) == (N, N, N)
    assert r["fpr_resolution"] == 1 / N
    for entry in mia.values():
        assert (entry["n_members"], entry["n_nonmembers"]) == (N, N)
        assert set(entry) >= {"auc", "tpr_at_1pct_fpr", "tpr_at_0.1pct_fpr"}
    assert mia["loss"]["auc"] > 0.95 and mia["loss"]["tpr_at_1pct_fpr"] > 0.1
    assert mia["rmia_shadow"]["auc"] > 0.9 and mia["reference_shadow"]["auc"] > 0.9
    assert mia["rmia_shadow"]["gamma"] == 1.0 and mia["rmia_shadow"]["alpha"] == 0.0
    losses = r["mean_loss"]
    assert losses["target"]["members"] < 1.0 < 3.0 < losses["target"]["nonmembers"]
    assert abs(losses["pretrained"]["members"] - losses["pretrained"]["nonmembers"]) < 0.3
    _assert_optimistic_at_least_fixed(mia)
    _assert_no_text(r, _all_texts(study["sets"]))
    # without a shadow (Paper B's "more realistic" auditor) the shadow attacks go, the others are unchanged
    alone = ad.evaluate_adaptation_mias(target, members=split.members, nonmembers=split.nonmembers,
                                        pretrained=study["base"], shadow=None, population=split.population,
                                        tokenizer=tok, seq_len=SEQ)
    assert set(alone["mia"]) == {k for k in mia if "shadow" not in k} and "shadow" not in alone["mean_loss"]
    assert all(alone["mia"][k] == pytest.approx(mia[k]) for k in alone["mia"])

    # pre-training probe: the base leaks its pre-training texts; the adapted copy less so
    probe = study["sets"].pretraining
    p = ad.pretraining_leakage(study["base"], target, probe.members, probe.nonmembers, tokenizer=tok, seq_len=SEQ)
    assert p["base"]["loss"]["auc"] > 0.9 and p["adapted"]["loss"]["auc"] < p["base"]["loss"]["auc"]
    assert p["difference"] == {k: p["adapted"][k.removesuffix("_auc")]["auc"] - p["base"][k.removesuffix("_auc")]["auc"]
                               for k in ("loss_auc", "zlib_auc")}
    assert p["mean_loss"]["base"]["members"] < p["mean_loss"]["base"]["nonmembers"]
    _assert_no_text(p, _all_texts(study["sets"]))


def test_untouched_base_is_at_chance(study, full_finetuned):
    """The base never saw any adaptation set: with 400 members and 400 non-members the null AUC has
    sd sqrt(801/(12*400^2)) = 0.020; every fixed attack must be within 0.07 (3.4 sd) of 0.5."""
    from empriv.data.adaptation_sets import build_adaptation_sets, check_disjoint

    _, shadow = full_finetuned
    big = build_adaptation_sets(study["public"], n_members=400, n_nonmembers=400, n_shadow=1, n_population=200,
                                n_probe_members=1, n_probe_nonmembers=1, seed=2)
    check_disjoint({"shadow training": study["sets"].iid.shadow, "members": big.iid.members,
                    "nonmembers": big.iid.nonmembers, "population": big.iid.population})
    r = ad.evaluate_adaptation_mias(study["base"], members=big.iid.members, nonmembers=big.iid.nonmembers,
                                    pretrained=study["base"], shadow=shadow, population=big.iid.population,
                                    tokenizer=study["tokenizer"], seq_len=SEQ)
    for name, entry in r["mia"].items():
        if not entry["optimistic"]:
            assert abs(entry["auc"] - 0.5) < 0.07, name
    assert r["mia"]["reference_pretrained"]["auc"] == 0.5  # the base against itself: every score ties
    _assert_optimistic_at_least_fixed(r["mia"])


@pytest.mark.parametrize("method, dataset", [("prefix", "ood"), ("prompt", "iid"), ("lora", "ood")])
def test_same_call_scores_prefix_prompt_and_lora_models(study, method, dataset):
    """Each adapted model is scored exactly as an independent per-sample loss says.
    (The shadow is the same adaptation left at its initialisation: a cheap, weak reference.)"""
    from empriv.config import LoraParams
    from empriv.models.adaptations import prepare_adaptation
    from empriv.models.lm import encode_fixed, per_sample_mean_nll

    split, tok = study["sets"].split(dataset), study["tokenizer"]
    kwargs = {"lora": LoraParams(rank=4, alpha=8)} if method == "lora" else {"n_virtual": 8}
    target = prepare_adaptation(copy.deepcopy(study["base"]), method, init_seed=0, **kwargs)
    shadow = prepare_adaptation(copy.deepcopy(study["base"]), method, init_seed=1, **kwargs)
    ids, mask = encode_fixed(tok.encode_batch(list(split.members)), tok.eos_id, SEQ)
    with torch.no_grad():
        untrained = float(per_sample_mean_nll(target, ids, mask).mean())
        base_members = float(per_sample_mean_nll(study["base"], ids, mask).mean())
    finetune(target, tok, split.members, 100, 3e-2)
    r = ad.evaluate_adaptation_mias(target, members=split.members, nonmembers=split.nonmembers,
                                    pretrained=study["base"], shadow=shadow, population=split.population,
                                    tokenizer=tok, seq_len=SEQ)
    with torch.no_grad():
        per_sample = {}
        for role in ("members", "nonmembers"):
            ids, mask = encode_fixed(tok.encode_batch(list(getattr(split, role))), tok.eos_id, SEQ)
            per_sample[role] = per_sample_mean_nll(target, ids, mask).numpy()
    assert r["mean_loss"]["target"]["members"] == pytest.approx(per_sample["members"].mean(), abs=1e-5)
    assert r["mean_loss"]["target"]["nonmembers"] == pytest.approx(per_sample["nonmembers"].mean(), abs=1e-5)
    labels = np.r_[np.ones(N, bool), np.zeros(N, bool)]
    assert r["mia"]["loss"]["auc"] == pytest.approx(auc(-np.r_[per_sample["members"], per_sample["nonmembers"]], labels))
    # in 100 steps a tiny model's 8 virtual tokens learn the set's format more than its members
    # (measured loss AUC: prefix 0.57, prompt 0.56, within 1.4 sd of chance for 64/64); LoRA 0.78
    assert r["mean_loss"]["target"]["members"] < r["mean_loss"]["target"]["nonmembers"]
    assert r["mia"]["loss"]["auc"] > {"prefix": 0.5, "prompt": 0.5, "lora": 0.7}[method]
    # the pretrained reference is the untouched base (the adaptation was prepared on a copy)
    assert r["mean_loss"]["pretrained"]["members"] == pytest.approx(base_members, abs=1e-5)
    assert r["mean_loss"]["target"]["members"] < untrained - 0.1  # the adaptation trained
    _assert_optimistic_at_least_fixed(r["mia"])
    _assert_no_text(r, _all_texts(study["sets"]))
