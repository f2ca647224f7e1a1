"""The sweep's plan: which items of which DVC stages, in which order, which of them are stale, and the resources each
stage's jobs ask for (``sweep`` params). Reads the project through :mod:`empriv.infra.dvc_adapter`, never writes."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from empriv.config import ConfigError, SlurmParams, SweepParams, _did_you_mean, parse_section, read_yaml
from empriv.infra.dvc_adapter import open_pipeline
from empriv.infra.sweep.removed import RemovedFinder, find_removed


class SweepError(ValueError):
    """A sweep cannot start or cannot finish cleanly; the message is one line."""

# --------------------------------------------------------------------------------------------- parameters
def load_sweep_params(params_path: str | Path) -> SweepParams:
    """The ``sweep`` section of a params file (defaults when it has none). Only this section is read: the sweep
    works on any DVC project; the pipeline's own validation runs as its upstream stage."""
    path = Path(params_path)
    if not path.exists():
        return SweepParams()
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: not a mapping of sections (got {type(raw).__name__})")
    return parse_section(SweepParams, raw.get("sweep", {}), "sweep")


def merged_resources(sweep: SweepParams, stage: str) -> SlurmParams:
    """``sweep.slurm`` with the fields that ``sweep.resources[stage]`` sets replacing the defaults, field by field
    (pydantic's ``model_fields_set``: a field the override leaves out keeps the ``sweep.slurm`` value, even where
    the override's own default differs). ``additional`` is one field: an override that sets it replaces it."""
    override = sweep.resources.get(stage)
    if override is None:
        return sweep.slurm
    return sweep.slurm.model_copy(update={name: getattr(override, name) for name in override.model_fields_set})

# --------------------------------------------------------------------------------------------- the plan
@dataclass
class Item:
    """One matrix item of a selected stage."""

    address: str  # DVC's name: train@eps8-b128-…
    stage: str  # the matrix stage: train
    key: str  # the item's key: eps8-b128-…
    commands: list[str]  # the resolved cmd (one entry per line of a list cmd)
    wdir: str  # absolute working directory of the command
    needs: list[str] = field(default_factory=list)  # items of the sweep it depends on (run first)
    stale: bool = False
    changed: bool = False  # DVC says the stage itself changed (stale without: only because something it needs is)
    between: bool = False  # not a selected item: a stage between selected items (runs as a job of its own)
    deps: list[str] = field(default_factory=list)  # absolute paths of its file/directory deps (params files apart)
    outs: list[str] = field(default_factory=list)  # absolute paths of its outputs
    params: dict[str, list[str]] = field(default_factory=dict)  # params file -> keys it reads ([]: the whole file)
    # stale only because its outputs are missing from the DVC cache, intact in the workspace: committed, not run
    uncached: bool = False
    always_runs: bool = False  # DVC runs it every time (always_changed, or no deps): never recovered
    # outputs of runs dvc.yaml no longer has, inside its directory deps (removed.py): moved away at its turn
    removed: list[str] = field(default_factory=list)


@dataclass
class Plan:
    root: Path
    stages: list[str]
    items: list[Item]  # every selected item and every stage between them, dependency order
    upstream: list[str]  # other stages the items depend on directly (``dvc repro`` targets)
    stale_upstream: list[str]  # of those (and their ancestors), the ones DVC would run
    downstream: list[str]  # stages outside the sweep that depend on selected items
    empty: list[str] = field(default_factory=list)  # selected stages whose matrix has no items (skipped)
    lock_stale: list[str] | None = None  # dvc.lock entries of stages dvc.yaml no longer has (None: not looked at)

    @property
    def to_run(self) -> list[Item]:
        return [i for i in self.items if i.stale]

    @property
    def up_to_date(self) -> list[Item]:
        return [i for i in self.items if not i.stale]


def matrix_stages(root: Path) -> tuple[list[str], list[str]]:
    """(every stage name of ``root/dvc.yaml``, those defined with ``matrix`` or ``foreach``)."""
    path = root / "dvc.yaml"
    if not path.exists():
        raise SweepError(f"{path}: no dvc.yaml: run the sweep from the project root (or pass --root)")
    stages = (read_yaml(path) or {}).get("stages") or {}
    names = list(stages)
    return names, [n for n, d in stages.items() if isinstance(d, dict) and ("matrix" in d or "foreach" in d)]


def _select_stages(requested: list[str], all_stages: list[str], matrix: list[str], key: str) -> list[str]:
    if not matrix:
        raise SweepError("dvc.yaml has no matrix stage (no stage with `matrix:` or `foreach:`): nothing to sweep")
    allowed = ", ".join(matrix)
    chosen: list[str] = []
    for name in requested:
        if name not in all_stages:
            raise SweepError(f"{key}: unknown stage{_did_you_mean(name, all_stages)} (got {name!r}; "
                             f"allowed: matrix stages of dvc.yaml: {allowed})")
        if name not in matrix:
            raise SweepError(f"{key}: stage {name!r} has no matrix (one command, no items): run it with `dvc repro "
                             f"{name}` (got {name!r}; allowed: matrix stages of dvc.yaml: {allowed})")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise SweepError(f"{key}: no stage selected (got []; allowed: matrix stages of dvc.yaml: {allowed})")
    return chosen


def threads_per_job(params_path: Path) -> int:
    """runtime.threads of the params file (its default when absent): the torch threads each stage process uses."""
    from empriv.config import RuntimeParams

    runtime = (read_yaml(params_path) or {}).get("runtime") or {}
    threads = runtime.get("threads", RuntimeParams.model_fields["threads"].default)
    return threads if isinstance(threads, int) and threads >= 1 else 1


def make_plan(root: str | Path, stages: list[str], patterns: list[str] | None = None, *,
              stages_key: str = "sweep.stages", everything: bool = False) -> Plan:
    """Resolve the sweep's items, their order and which ones are stale (DVC's own ``Stage.changed``, propagated
    from stale ancestors: an item below a stale stage will run once that stage has run). Reads, never writes
    (but for DVC's hash cache in .dvc/tmp).

    ``everything``: every stage of the project's dvc.yaml is a member — the matrix items and the single stages
    (``prepare``, ``base``, ``analyze``, …) alike — so there is no upstream ``dvc repro`` and nothing downstream
    is left stale (``stages`` and ``patterns`` are then ignored)."""
    root = Path(root).resolve()
    all_stages, matrix = matrix_stages(root)
    chosen = list(all_stages) if everything else _select_stages(stages, all_stages, matrix, stages_key)
    # DVC names stages relative to the working directory; params.yaml is parsed once for dvc.yaml's vars and every
    # stage's params (dvc_adapter.open_pipeline)
    with open_pipeline(root) as pipeline:
        graph = pipeline.graph  # over addresses; edges go from a stage to the stages it depends on
        info = {s.address: s for s in pipeline.stages}
        by_group: dict[str, list[str]] = {name: [] for name in chosen}
        here = str(root / "dvc.yaml")
        for stage in pipeline.stages:
            group, _, key = stage.address.partition("@")
            if group in by_group and (stage.dvcfile == here if everything else key):
                by_group[group].append(stage.address)
        if everything:  # a stage whose matrix is empty has no member and is simply not part of the run
            chosen = [name for name in chosen if by_group[name]]
            patterns = None
        # a stage whose matrix is empty (the default adaptation audit, an emptied audit cube) is skipped when
        # another selected stage has items; alone, it is an error
        empty = [name for name in chosen if not by_group[name]]
        if chosen and len(empty) == len(chosen):
            raise SweepError(f"{stages_key}: matrix stage {empty[0]!r} has no items (its matrix/foreach list is "
                             f"empty) (got {empty[0]!r}; allowed: a matrix stage with items)")
        chosen = [name for name in chosen if by_group[name]]
        candidates = [s for name in chosen for s in by_group[name]]
        if patterns:
            selected = [s for s in candidates
                        if any(fnmatch.fnmatchcase(s, p) or fnmatch.fnmatchcase(s.partition("@")[2], p)
                               for p in patterns)]
            if not selected:
                pats = ", ".join(repr(p) for p in patterns)
                examples = ", ".join(candidates[:3])
                raise SweepError(f"--items: no item of {', '.join(chosen)} matches {pats} (got {pats}; allowed: "
                                 f"globs over item names or their keys, e.g. {examples})")
        else:
            selected = candidates
        chosen_set = set(selected)

        import networkx as nx

        # between: non-selected stages that depend on a selected item and that a selected item depends on (the
        # pipeline's `filter` reads every train@ output and every score@ reads it): they run as jobs too, in order
        below = set().union(*(nx.descendants(graph, s) for s in selected)) - chosen_set  # what items depend on
        between = {u for u in below if any(d in chosen_set for d in nx.descendants(graph, u))}
        members = chosen_set | between
        # upstream: the other stages the sweep's members depend on directly (one `dvc repro` brings them up to date)
        upstream: list[str] = []
        for s in [*selected, *sorted(between)]:
            for dep in graph.successors(s):
                if dep not in members and dep not in upstream:
                    upstream.append(dep)
        # dependency order: deps first, ties in dvc.yaml's order
        sub = graph.subgraph(members)
        position = {s.address: i for i, s in enumerate(pipeline.stages)}
        order = list(nx.lexicographical_topological_sort(sub.reverse(copy=True), key=position.__getitem__))
        # staleness: every stage the members depend on, transitively, dependency-first; a stage below a stale
        # one is stale (it runs once that one has run), as `dvc repro` would decide
        relevant = members | below
        rel = graph.subgraph(relevant)
        stale: dict[str, bool] = {}
        changed = pipeline.changed(rel.nodes)  # DVC's Stage.changed of each, under one read lock
        # a member whose directory deps hold outputs of removed runs reads another directory once they are moved
        # away at its turn (removed.py): stale, though DVC's answer comes only then
        lock_stale = pipeline.lock_entries_not_in(here)
        finder = RemovedFinder(root, [o for st in pipeline.stages for o in st.outs], lock_stale)
        removed = {s: find_removed(finder, list(info[s].deps)) for s in members}
        for s in reversed(list(nx.topological_sort(rel))):
            stale[s] = changed[s] or bool(removed.get(s)) or any(stale[d] for d in rel.successors(s))
        stale_upstream = sorted(s for s in relevant - members if stale[s])
        uncached = pipeline.missing_from_cache([s for s in order if changed[s]])
        downstream: set[str] = set()
        for s in members:
            downstream |= {a for a in nx.ancestors(graph, s) if a not in members}
        items = []
        for s in order:
            group, _, key = s.partition("@")
            items.append(Item(address=s, stage=group, key=key, commands=list(info[s].commands), wdir=info[s].wdir,
                              needs=[d for d in graph.successors(s) if d in members], stale=stale[s],
                              changed=changed[s], between=s in between, deps=list(info[s].deps),
                              outs=list(info[s].outs), params={f: list(k) for f, k in info[s].params},
                              uncached=s in uncached, always_runs=info[s].always_runs, removed=removed[s]))
        return Plan(root=root, stages=chosen, items=items, upstream=upstream, stale_upstream=stale_upstream,
                    downstream=sorted(downstream), empty=empty, lock_stale=lock_stale)
