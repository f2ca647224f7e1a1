"""empriv.train.dpflat: the DP-Flat loop over the components of empriv.train.flatness (tests/train/test_flatness.py)
with its settings from empriv.config.DPFlatParams — switches and caveats recorded, strict variants, one-line errors,
crash and resume."""

from __future__ import annotations

import math

import pytest
import torch

from empriv.config import DPFlatParams
from empriv.models.adaptations import prepare_adaptation
from empriv.models.lm import encode_fixed
from empriv.train.dpflat import dpflat_train
from empriv.train.flatness import AWP_PUBLISHED_CAVEAT, ELIMINATION_PRIVATE_CAVEAT, KD_PRIVATE_CAVEAT
from train.test_flatness import EOS, IDS, MASK, P, WIDTH, base, prefix_model



# ----------------------------------------------------------------------------- errors


def test_bad_settings_are_refused_where_they_are_defined():
    """DPFlatParams validates each field (a pydantic ValidationError, a ValueError naming the field)."""
    for kw, field in [(dict(kd=True, kd_lambda=-0.1), "kd_lambda"), (dict(awp=True, awp_steps=-1), "awp_steps"),
                      (dict(awp=True, awp_steps=1, gamma=0.0), "gamma"),
                      (dict(layer_elimination=True, target_layers=0), "target_layers"),
                      (dict(layer_elimination=True), "layer_elimination"), (dict(awp_variant="noisy"), "awp_variant")]:
        with pytest.raises(ValueError, match=field):
            DPFlatParams(**kw)


def test_bad_input_is_a_one_line_value_error():
    model = prefix_model(dtype=torch.float32)
    run = dict(steps=4, sample_rate=0.5, noise_multiplier=1.0, clip_norm=1.0, lr=0.01,
               sampler_generator=torch.Generator().manual_seed(0))
    cases = [
        (DPFlatParams(awp=True, awp_steps=5),
         "awp_steps (E, at most T): out of range (got 5; allowed: an integer in [0, 4])"),
        (DPFlatParams(layer_elimination=True, target_layers=4),
         "target_layers (at most the prefix's layer count): out of range (got 4; allowed: an integer in [1, 3])"),
    ]
    for config, message in cases:
        with pytest.raises(ValueError) as err:
            dpflat_train(model, IDS, MASK, config=config, **run)
        assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"etas must be a non-empty list of step sizes in \[0, 1\]"):
        dpflat_train(model, IDS, MASK, config=DPFlatParams(), etas=[2.0], **run)
    prompt = prepare_adaptation(base(torch.float32), "prompt", n_virtual=P, init_seed=0)
    with pytest.raises(ValueError, match="layer_elimination needs a prefix-tuned model"):
        dpflat_train(prompt, IDS, MASK, config=DPFlatParams(layer_elimination=True, target_layers=1), **run)
    with pytest.raises(ValueError, match="public_ids/public_mask must hold public sequences"):
        dpflat_train(model, IDS, MASK, config=DPFlatParams(kd=True, kd_data="public", nor_steps=1), **run)


def test_nor_steps_count_only_with_kd_on():
    """train.dpflat.nor_steps (default 50) is recorded as 0 and trains nothing when KD is off."""
    r = _train(DPFlatParams(awp=True, awp_steps=1), 1.0, steps=2)
    assert DPFlatParams().nor_steps == 50 and r.switches["nor_steps"] == 0 and r.nor_losses == []


# ----------------------------------------------------------------------------- the loop

REPEATED_IDS, REPEATED_MASK = encode_fixed([[3, 4, 5, 6, 7, 8, 9, 10]] * 16, EOS, 10)


def _train(config, sigma, steps=25, model=None, public=None, lr=0.05):
    model = prefix_model(dtype=torch.float32) if model is None else model
    extra = {} if public is None else dict(public_ids=public[0], public_mask=public[1])
    return dpflat_train(model, REPEATED_IDS, REPEATED_MASK, config=config, steps=steps, sample_rate=0.5,
                        noise_multiplier=sigma, clip_norm=1.0, lr=lr, sampler_generator=torch.Generator().manual_seed(0),
                        noise_generator=torch.Generator().manual_seed(1), **extra)


def test_dpflat_without_noise_lowers_the_loss_and_records_switches_and_caveats():
    config = DPFlatParams(awp=True, awp_steps=5, gamma=0.05, layer_elimination=True, target_layers=2,
                          kd=True, kd_lambda=1e-4, nor_steps=5, nor_lr=1.0)
    # λ below the data gradient's scale (~1e-3 on this base): under Adam a larger λ dominates the direction
    r = _train(config, None, lr=0.5)
    # a random tiny base: the prefix moves the loss only from ~log V = 5.70 to ~5.56 in 25 steps
    assert sum(r.losses[-3:]) / 3 < sum(r.losses[:3]) / 3 - 0.05
    assert r.switches["awp"] and r.switches["kd"] and r.switches["layer_elimination"]
    assert r.switches["private"] is False
    assert set(r.caveats) == {AWP_PUBLISHED_CAVEAT, ELIMINATION_PRIVATE_CAVEAT, KD_PRIVATE_CAVEAT}
    assert len(r.kept_layers) == 2 and r.model.prefix.layers == r.kept_layers
    assert r.trainable_parameters == P * 2 * WIDTH
    assert len(r.losses) == 25 and len(r.kd_distances) == 25 and r.kd_distances[0] > 0
    assert len(r.nor_losses) == 5
    record = r.record()
    assert record["kept_layers"] == list(r.kept_layers) and record["elimination"]["kept"] == list(r.kept_layers)


def test_strict_variants_record_no_caveat_and_strict_awp_starts_unperturbed():
    public = encode_fixed([[20, 21, 22, 23]] * 4, EOS, 10)
    config = DPFlatParams(awp=True, awp_variant="strict", awp_steps=3, gamma=0.05, layer_elimination=True,
                          target_layers=2, elimination_data="public", kd=True, kd_data="public", nor_steps=2)
    r = _train(config, 1.0, steps=4, public=public)
    assert r.caveats == [] and r.switches["awp_variant"] == "strict"
    # strict AWP: v = 0 at step 1 (no previous noisy gradient), so E = 1 is plain DP prefix tuning
    strict_one = _train(DPFlatParams(awp=True, awp_variant="strict", awp_steps=1), 1.0, steps=3)
    plain = _train(DPFlatParams(), 1.0, steps=3)
    assert strict_one.losses == plain.losses
    assert torch.equal(strict_one.model.prefix.table.weight, plain.model.prefix.table.weight)
    published = _train(DPFlatParams(awp=True, awp_steps=1, gamma=0.5), 1.0, steps=3)
    assert published.losses[0] != plain.losses[0]  # the first step's loss is taken at w + v
    assert published.caveats == [AWP_PUBLISHED_CAVEAT]
    assert not math.isnan(sum(published.losses))


# ------------------------------------------------------------------------------------- checkpoint and resume


class _Crash(RuntimeError):
    pass


@pytest.mark.parametrize("variant", ["published", "strict"])
def test_a_crashed_dpflat_run_resumes_bit_identical(tmp_path, variant, monkeypatch):
    """Every switch on (strict AWP needs the last released gradient from the checkpoint), a crash inside step 6 of
    8 with a checkpoint every 2 steps: the re-run redoes the elimination and w_nor, resumes after step 4 and ends
    with the uninterrupted run's weights and curves; the checkpoints are gone."""
    import empriv.train.dpflat as dpflat_mod
    import empriv.train.flatness as flatness_mod
    from empriv.train.checkpoint import Checkpointer

    config = DPFlatParams(awp=True, awp_variant=variant, awp_steps=6, gamma=0.05, layer_elimination=True,
                          target_layers=2, kd=True, kd_lambda=1e-3, nor_steps=3, nor_lr=0.5)

    def run(checkpoint=None):
        return dpflat_train(prefix_model(dtype=torch.float32), REPEATED_IDS, REPEATED_MASK, config=config, steps=8,
                            sample_rate=0.5, noise_multiplier=1.0, clip_norm=1.0, lr=0.05,
                            sampler_generator=torch.Generator().manual_seed(0),
                            noise_generator=torch.Generator().manual_seed(1),
                            nor_generator=torch.Generator().manual_seed(2), checkpoint=checkpoint)

    ref = run()
    ck = Checkpointer(tmp_path / "ck", 2, identity={"run": "t"})
    calls = {"n": 0}
    real_step = dpflat_mod.dp_step

    def crashing_step(*args, **kwargs):  # steps 1-6 take AWP's perturbed step (through dp_step), 7-8 dp_step itself
        calls["n"] += 1
        if calls["n"] == 6:
            raise _Crash
        return real_step(*args, **kwargs)

    for module in (dpflat_mod, flatness_mod):  # the loop's own step and AWP's perturbed step
        monkeypatch.setattr(module, "dp_step", crashing_step)
    with pytest.raises(_Crash):
        run(ck)
    for module in (dpflat_mod, flatness_mod):
        monkeypatch.setattr(module, "dp_step", real_step)
    assert [p.name for p in ck.checkpoints()] == ["step-000000004"]
    res = run(ck)
    assert res.resumed_from_step == 4 and ref.resumed_from_step is None
    assert res.kept_layers == ref.kept_layers
    assert torch.equal(res.model.prefix.table.weight, ref.model.prefix.table.weight)
    assert res.losses == ref.losses and res.kd_distances == ref.kd_distances and len(res.losses) == 8
    assert res.empty_batches == ref.empty_batches
    assert not (tmp_path / "ck").exists()
