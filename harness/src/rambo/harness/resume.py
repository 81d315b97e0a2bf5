"""The resume policy of a run: `resume=false` starts a new run and refuses to overwrite a
checkpoint already at its path (of this run or of another: [`RunExistsError`][rambo.harness.resume.RunExistsError] says
which, and how to name this run or resume that one), `true` continues the checkpoint of the same run
and refuses another, `auto` (the pipeline's) continues the same run and sets a checkpoint of
another run aside (renamed `<name>.stale`, or `<name>.stale.1`, ... when that name is taken:
[`set_aside`][rambo.harness.checkpoint.set_aside]) before starting over.

A file at the checkpoint path that is no checkpoint of this app (another app's, or something `torch.save` wrote that
holds no run: [`NotThisAppsCheckpoint`][rambo.harness.resume.NotThisAppsCheckpoint]) is neither continued nor
overwritten: `true` and `false` stop with its path and what to do, `auto` sets it aside as another run's. Every refusal
here is an [`InputError`][rambo.harness.config_check.InputError]: the apps print its message as one `error:` line and
exit with code 2.

What makes two runs "the same" is declared in each app's config: the run identity is the resolved
configuration without the keys listed in `resume_may_change` (where files are, how the run is
shown, which device runs it). Everything else, epochs included, must be equal: a changed value
would silently mix two experiments in one result.

A key added to the config later would change the identity of every run written before it, and
`resume=auto` would train them all again. The config's `identity_defaults` (a mapping of flat
keys, `a.b`, to values; itself listed in `resume_may_change`) declares such a key's default:
a key whose value equals its declared default is left out of the identity, so a checkpoint
written before the key existed still matches a run at the default, and a run at another value
(`precision: bfloat16`) does not. The defaults are written out as values, never as
interpolations of the keys themselves (which would always match).

A key that moves (retrieval's `data.margin` became `loss.margin`) would likewise change the
identity of every run written before. The config's `identity_renamed` (flat old key -> flat new
key; itself in `resume_may_change`) declares the move: a checkpoint's identity is read with its
old keys under their new names ([`renamed`][rambo.harness.resume.renamed]) before it is compared, so a checkpoint with
`data.margin: 0.02` resumes a run with `loss.margin: 0.02` and is refused by one with
`loss.margin: 0.0`. Where the run's config has no key at the new name (retrieval's contrastive
row: its loss takes no margin, and `data.margin` reached no loss), the old key is dropped.

A checkpoint that cannot be read (cut short, overwritten:
[`DamagedCheckpoint`][rambo.harness.checkpoint.DamagedCheckpoint]) stops `resume=true` and `false` with its path and
what to do. `auto` sets it aside (renamed `<name>.damaged`, never deleted) and continues from the checkpoint of the
epoch before (`checkpoint.prev.pt`, which takes its name again), or from the start when there is none (or it
is damaged too); the log says which, and so do the run's metrics
([`checkpoint_to_resume`][rambo.harness.resume.checkpoint_to_resume]'s `recovered`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from .atomic import atomic_path
from .checkpoint import DamagedCheckpoint, NotACheckpoint, load_checkpoint, previous_path, set_aside
from .config_check import InputError

POLICIES = (False, True, "auto")
#: The options that give a run a checkpoint of its own, as a refusal names them.
OWN_FOLDER = "hydra.run.dir=..., or checkpoint_path=..."
log = logging.getLogger(__name__)


class RunExistsError(FileExistsError, InputError):
    """A new run (`resume=false`) would overwrite the checkpoint of a run already at its path."""


class ResumeRefused(InputError, ValueError):
    """The checkpoint at a run's path is not one this run may continue."""


class DifferentRun(ResumeRefused):
    """`resume=true` over the checkpoint of another configuration."""


class NotThisAppsCheckpoint(ResumeRefused):
    """The file at a run's checkpoint path is no checkpoint of this app."""

    def __init__(self, path: str | Path, reason: str, app: str):
        path = Path(path)
        self.path, self.reason = path, reason
        super().__init__(
            f"{path} is not a checkpoint of {app} ({reason}); this run neither continues nor overwrites it. "
            f"Move it away, or give this run a folder of its own ({OWN_FOLDER}), or run with resume=auto, "
            f"which sets it aside (renamed {path.name}.stale)"
        )


def check_policy(policy) -> None:
    if policy not in POLICIES or isinstance(policy, int) and not isinstance(policy, bool):
        raise ValueError(f"resume must be one of false, true, auto; got {policy!r}")


def run_identity(config: Mapping, may_change: Iterable[str] = (), defaults: Mapping | None = None) -> dict:
    """`config` flattened to `{"a.b": value}`, without the keys (and subtrees) in `may_change`
    and without the flat keys whose value equals theirs in `defaults` (`identity_defaults`)."""
    skip, defaults = set(may_change), dict(defaults or {})
    flat = {}

    def walk(node: Mapping, prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if name in skip:
                continue
            if isinstance(value, Mapping) and value:
                walk(value, f"{name}.")
            elif name not in defaults or value != defaults[name]:
                flat[name] = value

    walk(config, "")
    return flat


def differences(saved: Mapping, current: Mapping, shown: int, order=None) -> str:
    """`"key: old -> new, ..."` for the first `shown` differing keys (sorted, by `order` when
    given), `" and N more"` after them; `""` when the two identities are equal."""
    differing = sorted((key for key in set(saved) | set(current) if saved.get(key) != current.get(key)), key=order)
    details = ", ".join(f"{key}: {saved.get(key)!r} -> {current.get(key)!r}" for key in differing[:shown])
    return details + (f" and {len(differing) - shown} more" if len(differing) > shown else "")


def check_same_run(saved: Mapping, current: Mapping, path: str | Path) -> None:
    """[`DifferentRun`][rambo.harness.resume.DifferentRun] naming the differing keys (old -> new) unless the two
    identities are equal."""
    details = differences(saved, current, 6)
    if details:
        raise DifferentRun(
            f"{path} was written by a different configuration ({details}); resume=true continues only the same run. "
            f"Give this run a folder of its own ({OWN_FOLDER}), or run with resume=auto, which sets that "
            f"checkpoint aside (renamed {Path(path).name}.stale) and starts over"
        )


def shown_keys(state: Mapping, shown: int = 4) -> str:
    """The first `shown` keys of `state`, `" and N more"` after them."""
    keys = [repr(key) for key in list(state)[:shown]]
    more = f" and {len(state) - shown} more" if len(state) > shown else ""
    return (", ".join(keys) + more) if keys else "no keys"


def no_run_in(state: Mapping) -> str | None:
    """Why `state` (a loaded dict) holds no run [`checkpoint_to_resume`][rambo.harness.resume.checkpoint_to_resume] can
    compare: its `identity` or `epoch` missing (e.g. `torch.save({"a": 1}, ...)`); `None` when it has both."""
    missing = [key for key in ("identity", "epoch") if key not in state]
    if not missing:
        return None
    return f"it holds a dict of {shown_keys(state)}, without the {' and '.join(missing)} of a run"


def _without(identity: Mapping, may_change: Iterable[str]) -> dict:
    """A saved `identity` less the keys under `may_change`, so that a key declared changeable
    after the checkpoint was written does not count as a difference (the current identity,
    from [`run_identity`][rambo.harness.resume.run_identity], has none of them)."""
    prefixes = tuple(may_change)
    return {
        key: value
        for key, value in identity.items()
        if not any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)
    }


def renamed(
    saved: Mapping, renames: Mapping | None, config: Mapping | None = None, defaults: Mapping | None = None
) -> dict:
    """A checkpoint's `saved` identity with each old key of `renames` (`identity_renamed`:
    flat old key -> flat new key) under its new name. An old key whose new name the current run's
    `config` (its resolved config, nested; `None`: not checked) lacks is dropped (the setting
    is none of this run's); one whose value equals the new key's entry in `defaults`
    (`identity_defaults`) is dropped, as [`run_identity`][rambo.harness.resume.run_identity] drops the new key at that
    value. A checkpoint that has the new key already (written after the move) is left as it is."""
    saved, defaults = dict(saved), dict(defaults or {})
    for old, new in (renames or {}).items():
        if old not in saved or new in saved:
            continue
        value = saved.pop(old)
        if (config is None or _has_key(config, new)) and not (new in defaults and value == defaults[new]):
            saved[new] = value
    return saved


def _has_key(config: Mapping, flat: str) -> bool:
    node = config
    for part in flat.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def checkpoint_to_resume(
    path: str | Path,
    policy,
    identity: Mapping,
    set_aside: bool = True,
    may_change: Iterable[str] = (),
    renames: Mapping | None = None,
    config: Mapping | None = None,
    defaults: Mapping | None = None,
    recovered: list | None = None,
    app: str = "this app",
    foreign: Callable[[Mapping], str | None] = no_run_in,
) -> dict | None:
    """The checkpoint at `path` to continue under `policy`, or `None` to start over.

    `set_aside=False` (the non-main processes of a distributed run, which call this after the
    main process has) leaves the renaming of a checkpoint of another run, or of a damaged one, to
    the main process; `may_change` is the run's `resume_may_change` (see `_without`);
    `renames`, `config` and `defaults` are the run's `identity_renamed`, resolved config and
    `identity_defaults` (see [`renamed`][rambo.harness.resume.renamed]). A damaged checkpoint set aside under `auto` is
    recorded in `recovered` (a list, appended to: see [`recover_damaged`][rambo.harness.resume.recover_damaged]).
    `foreign(state)` says why a loaded dict is no checkpoint of the app named `app` (`None` when it is one;
    [`no_run_in`][rambo.harness.resume.no_run_in] by default); such a file, and one that holds no dict, stops `true` and
    `false` ([`NotThisAppsCheckpoint`][rambo.harness.resume.NotThisAppsCheckpoint]) and is set aside under `auto`, as
    another run's checkpoint is."""
    check_policy(policy)
    path = Path(path)
    if not path.is_file():
        return None
    record = None
    try:
        state = load_checkpoint(path)
        reason = foreign(state)
    except NotACheckpoint as loaded:  # it loads, but holds no dict: no checkpoint, not a damaged one
        state, reason = None, loaded.reason
    except DamagedCheckpoint as damaged:
        if policy != "auto" or not set_aside:
            raise DamagedCheckpoint(path, damaged.reason, _damaged_next_step(path)) from None
        record, state = recover_damaged(path, damaged)
        if recovered is not None:
            recovered.append(record)
        if state is None:
            return None
        reason = foreign(state)
    if reason is not None:
        if policy != "auto":
            raise NotThisAppsCheckpoint(path, reason, app)
        other = f"{path} is not a checkpoint of {app} ({reason})"
    else:
        saved = _without(renamed(state.get("identity", {}), renames, config, defaults), may_change)
        if policy is False:
            raise _exists(path, state, saved, identity)
        details = differences(saved, identity, 6)
        if not details:
            log.info("resuming %s from epoch %s", path, state.get("epoch"))
            return state
        if policy != "auto":
            check_same_run(saved, identity, path)
        other = f"{path} was written by a different configuration ({details})"
    if set_aside:
        set_aside_other_run(path, other)
    if record is not None:  # the earlier checkpoint was another run's: this one starts over
        record.update(resumed_from=None, resumed_epoch=0)
    return None


def set_aside_other_run(path: Path, why: str) -> list[Path]:
    """Set the checkpoint `path` of another run aside ([`set_aside`][rambo.harness.checkpoint.set_aside], `.stale`), and
    that run's checkpoint of the epoch before with it; log where each went. Returns the new paths."""
    moved = [set_aside(path, "stale")]
    previous = previous_path(path)
    if previous.is_file():
        moved.append(set_aside(previous, "stale"))
    where = " and ".join(f"{source} as {aside}" for source, aside in zip([path, previous], moved))
    log.warning("%s: set aside %s; starting over", why, where)
    return moved


def _damaged_next_step(path: Path) -> str:
    previous = previous_path(path)
    earlier = f"from {previous.name}, the checkpoint of the epoch before" if previous.is_file() else "from the start"
    return (
        f"run again with resume=auto to set it aside (renamed {path.name}.damaged) and continue {earlier}, "
        "or move it away yourself"
    )


def set_aside_damaged(path: Path) -> Path:
    """Rename the damaged file `path` to `<name>.damaged` (`.damaged.1`, ... when taken:
    [`set_aside`][rambo.harness.checkpoint.set_aside]): kept, never deleted, never over another file."""
    return set_aside(path, "damaged")


def recover_damaged(path: Path, damaged: DamagedCheckpoint) -> tuple[dict, dict | None]:
    """Set the damaged checkpoint `path` aside and put the checkpoint of the epoch before in its
    place (a hard link, or a copy: that one keeps its own name too), if there is one that loads.
    Returns `(record, state)`: `record` says what happened (file names, for the run's metrics),
    `state` is the checkpoint to continue (`None`: start over)."""
    aside = set_aside_damaged(path)
    log.warning("%s is a damaged checkpoint (%s): set it aside as %s", path, damaged.reason, aside)
    record = {"damaged_checkpoint": aside.name, "damage": damaged.reason, "resumed_from": None, "resumed_epoch": 0}
    previous = previous_path(path)
    state = None
    if previous.is_file():
        try:
            state = load_checkpoint(previous)
        except DamagedCheckpoint as also:
            log.warning(
                "%s is damaged too (%s): set it aside as %s", previous, also.reason, set_aside_damaged(previous)
            )
    if state is None:
        log.warning("no earlier checkpoint to continue from: %s trains from the start", path)
        return record, None
    with atomic_path(path) as temporary:
        temporary.unlink()
        try:
            os.link(previous, temporary)
        except OSError:  # no hard links on this file system
            temporary.write_bytes(previous.read_bytes())
    record.update(resumed_from=previous.name, resumed_epoch=state.get("epoch"))
    log.warning("continuing from %s (epoch %s), the checkpoint of the epoch before", previous, state.get("epoch"))
    return record, state


def _exists(path: Path, state: Mapping, saved: Mapping, identity: Mapping) -> RunExistsError:
    """What to tell a user whose new run would overwrite the checkpoint at `path` (`saved`: its
    identity as [`checkpoint_to_resume`][rambo.harness.resume.checkpoint_to_resume] compares it)."""
    names_first = lambda key: (not key.endswith("name"), key)  # noqa: E731 (names say what the run is)
    details = differences(saved, identity, 4, names_first)
    if details:
        return RunExistsError(
            f"{path} holds another run ({details}, epoch {state.get('epoch')}); this run would overwrite it. "
            "Give this run a name of its own (experiment_name=..., which names its folder and W&B group), "
            "or continue that run with its own settings (resume=true), or set its checkpoint aside (resume=auto)"
        )
    return RunExistsError(
        f"{path} holds this run already (epoch {state.get('epoch')}); a new run would overwrite it. "
        "Continue it with resume=true (a finished run writes its results again), or delete the checkpoint "
        "to train it from the start"
    )
