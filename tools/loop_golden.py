"""Fingerprints of every DP training loop's outcome on the tiny test model, to prove a refactor of the loops changes
no number: ``python tools/loop_golden.py OUT.json`` writes, per case, the SHA-256 of the trained weights (every tensor's
bytes) and of the recorded curves/metrics (wall times left out); ``--compare BEFORE.json`` also reports every case
whose fingerprint differs (exit 1 if any).

Cases: DP-SGD full (fast step, opacus step, non-private) and LoRA; Group Privacy and User-wise units (per_unit and
per_record aggregation, fixed and per-step selections, ε = ∞); DP-Flat (published and strict, through train_model and
directly with every switch); DPZero (with KD, and MeZO); and a crash + resume from a checkpoint of every loop.
Fingerprints are machine-specific (float kernels differ between CPUs): compare two runs on the same machine, with one
thread.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "train")]


def _digest_tensors(named) -> str:
    import torch

    h = hashlib.sha256()
    for name, t in named:
        t = torch.as_tensor(t).detach().cpu().contiguous()
        h.update(f"{name}|{tuple(t.shape)}|{t.dtype}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def _plain(obj):
    if isinstance(obj, float) and math.isnan(obj):
        return "nan"
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items() if k not in ("wall_time_s", "train_time_s", "setup_time_s")}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if hasattr(obj, "__dataclass_fields__"):
        return _plain({k: getattr(obj, k) for k in obj.__dataclass_fields__ if k != "model"})
    if hasattr(obj, "tolist"):
        return obj.tolist()
    return obj if isinstance(obj, (str, int, float, bool, type(None))) else repr(type(obj))


def _entry(weights, record) -> dict:
    text = json.dumps(_plain(record), sort_keys=True)
    return {"weights": _digest_tensors(sorted(weights.items())), "record": hashlib.sha256(text.encode()).hexdigest()[:16]}


def _state(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def record_level_cases(out: dict, tmp: Path) -> None:
    import random

    import test_checkpoint as tc
    from empriv.train.checkpoint import Checkpointer

    for method in ("full", "lora"):
        for private in (True, False):
            model, res = tc.record_run(method, private)
            out[f"dp-{method}-{'private' if private else 'inf'}"] = _entry(_state(model), res)
    model, res = tc.record_run("full", True, dp_step="opacus")
    out["dp-full-opacus"] = _entry(_state(model), res)
    model, res = tc.record_run("full", True, batch_size=1)
    out["dp-full-empty-batches"] = _entry(_state(model), res)
    for method in ("full", "lora"):
        crash_at = random.Random(f"{method}True").randrange(tc.EVERY, tc.T - 1)
        model, res = tc.crash_then_resume(lambda **kw: tc.record_run(method, True, **kw), tmp / f"ck-{method}",
                                          crash_at)
        out[f"dp-{method}-resumed"] = _entry(_state(model), res)


def user_level_cases(out: dict, tmp: Path) -> None:
    import test_checkpoint as tc

    for unit in ("group-k2-random", "userwise-k2-random", "userwise-k2-chunk", "userwise-k3-longest"):
        for private in (True, False):
            model, res = tc.user_run(unit, private)
            out[f"{unit}-{'private' if private else 'inf'}"] = _entry(_state(model), res)
        model, res = tc.crash_then_resume(lambda **kw: tc.user_run(unit, True, **kw), tmp / f"ck-{unit}", 7)
        out[f"{unit}-resumed"] = _entry(_state(model), res)


def userwise_direct_cases(out: dict) -> None:
    import torch

    import test_checkpoint as tc
    from empriv.train.userwise import fixed_records_per_unit, userwise_dp_sgd

    for strategy in ("per_unit", "per_record"):
        torch.manual_seed(0)
        from tiny_models import tiny_gpt2

        model = tiny_gpt2()
        from empriv.models.adapters import prepare_for_finetuning

        params = tc.make_params("full")
        model = prepare_for_finetuning(model, "full", params.train.lora, init_seed=3)
        _, ids, mask = tc.records()
        units = torch.tensor([(i * 7) % 10 for i in range(tc.N)])
        select = fixed_records_per_unit(ids, mask, units)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
        res = userwise_dp_sgd(model, opt, select, n_units=10, unit_sample_rate=0.4, steps=6, clip_norm=0.5,
                              noise_multiplier=0.8, sampler_generator=torch.Generator().manual_seed(1),
                              noise_generator=torch.Generator().manual_seed(2), micro_batch_records=3,
                              strategy=strategy)
        out[f"userwise-direct-{strategy}"] = _entry(_state(model), res)


def adaptation_cases(out: dict) -> None:
    import test_adaptation_methods as tam

    for method in ("dpflat", "dpflat-strict", "dpzero", "dpzero-kd", "prefix"):
        for epsilon in (8, math.inf):
            _, model, metrics, _, _ = tam._train(method, epsilon)
            out[f"train_model-{method}-{epsilon}"] = _entry(_state(model), metrics)


def dpflat_direct_cases(out: dict, tmp: Path) -> None:
    import torch

    import empriv.train.dpflat as dpflat_mod
    import test_dpflat as td
    from empriv.train.checkpoint import Checkpointer

    def config(**kw):
        if hasattr(dpflat_mod, "DPFlatConfig"):
            return dpflat_mod.DPFlatConfig(**kw)
        from empriv.config import DPFlatParams

        return DPFlatParams(**kw)

    for variant in ("published", "strict"):
        cfg = config(awp=True, awp_variant=variant, awp_steps=6, gamma=0.05, layer_elimination=True, target_layers=2,
                     kd=True, kd_lambda=1e-3, nor_steps=3, nor_lr=0.5, nor_batch_size=4)

        def run(checkpoint=None):
            return dpflat_mod.dpflat_train(
                td.prefix_model(dtype=torch.float32), td.REPEATED_IDS, td.REPEATED_MASK, config=cfg, steps=8,
                sample_rate=0.5, noise_multiplier=1.0, clip_norm=1.0, lr=0.05,
                sampler_generator=torch.Generator().manual_seed(0), noise_generator=torch.Generator().manual_seed(1),
                nor_generator=torch.Generator().manual_seed(2), checkpoint=checkpoint)

        res = run()
        out[f"dpflat-direct-{variant}"] = _entry(_state(res.model), res)
        ck = Checkpointer(tmp / f"ck-dpflat-{variant}", 2, identity={"run": "t"})
        real = dpflat_mod.dp_step
        calls = {"n": 0}

        def crashing(*a, **k):
            calls["n"] += 1
            if calls["n"] == 6:
                raise RuntimeError("crash")
            return real(*a, **k)

        import importlib.util

        modules = [dpflat_mod] + ([importlib.import_module("empriv.train.flatness")]
                                  if importlib.util.find_spec("empriv.train.flatness") else [])
        for m in modules:  # the loop's own step and AWP's perturbed step
            m.dp_step = crashing
        try:
            run(ck)
        except RuntimeError:
            pass
        finally:
            for m in modules:
                m.dp_step = real
        res = run(ck)
        assert res.resumed_from_step == 4, res.resumed_from_step
        out[f"dpflat-direct-{variant}-resumed"] = _entry(_state(res.model), res)


def dpzero_direct_cases(out: dict, tmp: Path) -> None:
    import torch

    import test_dpzero as tz
    from empriv.train.checkpoint import Checkpointer
    from empriv.train.dpzero import dpzero_prompt_tuning

    for private in (True, False):
        from tiny_models import tiny_gpt2

        model = tiny_gpt2(n_positions=32)
        ids, mask = tz.toy_data(12)
        kw = dict(n_prompt=3, steps=9, sample_rate=0.5, learning_rate=0.05, mu=1e-2,
                  clip_norm=1.0 if private else None, noise_multiplier=0.7 if private else None, seed=0,
                  micro_batch_size=4, kd_target=torch.zeros(3, 16), kd_lambda=0.1)
        prompt, res = dpzero_prompt_tuning(model, ids, mask, **kw)
        out[f"dpzero-direct-{'private' if private else 'inf'}"] = _entry({"prompt": prompt}, res)
        ck = Checkpointer(tmp / f"ck-dpzero-{private}", 2)

        def crash(step, facts):
            if step == 5:
                raise RuntimeError("crash")

        try:
            dpzero_prompt_tuning(model, ids, mask, checkpoint=ck, on_step=crash, **kw)
        except RuntimeError:
            pass
        prompt, res = dpzero_prompt_tuning(model, ids, mask, checkpoint=ck, **kw)
        assert res.resumed_from_step == 4
        out[f"dpzero-direct-{'private' if private else 'inf'}-resumed"] = _entry({"prompt": prompt}, res)


def main() -> int:
    import tempfile

    import torch

    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--compare")
    args = ap.parse_args()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        record_level_cases(out, tmp)
        user_level_cases(out, tmp)
        userwise_direct_cases(out)
        adaptation_cases(out)
        dpflat_direct_cases(out, tmp)
        dpzero_direct_cases(out, tmp)
    Path(args.out).write_text(json.dumps(out, indent=1, sort_keys=True))
    print(f"{len(out)} cases -> {args.out}")
    if args.compare:
        before = json.loads(Path(args.compare).read_text())
        differ = sorted(k for k in before.keys() | out.keys() if before.get(k) != out.get(k))
        for k in differ:
            print(f"DIFFERS {k}: {before.get(k)} -> {out.get(k)}")
        print(f"{len(before.keys() & out.keys()) - len(differ)} identical, {len(differ)} differ")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
