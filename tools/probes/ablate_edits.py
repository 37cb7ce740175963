# ablate_edits.py: the text edits the probes' ablation scripts (delta_prefill_phases.sh,
# delta_recurrence_ablate.sh, delta_t_ablate.sh) make to copies of a kernel's source, imported by
# their python3 parts. Every edit names the exact text it changes and how often it must be there, so
# a kernel change that moves an anchor stops the script (EditError) before anything is built;
# write_copies runs a script's edits and writes the copies.


class EditError(Exception):
    pass


def find_once(t, anchor, what):
    """The index of anchor in t, which must hold it exactly once."""
    n = t.count(anchor)
    if n != 1:
        raise EditError(f"{what}: anchor found {n} times, want 1: {anchor.strip().splitlines()[0]!r}")
    return t.index(anchor)


def replace(t, old, new, what, count=1):
    """t with old replaced by new, where t holds old exactly count times."""
    n = t.count(old)
    if n != count:
        raise EditError(f"{what}: text found {n} times, want {count}: {old.strip().splitlines()[0]!r}")
    return t.replace(old, new)


def write_copies(script, names, edits, orig, write):
    """For each name n, edits[n](orig) (orig a source text, or a tuple of them passed as separate
    arguments) handed to write(n, copy); full's copy must equal orig and every other differ from
    it. On an EditError, exits with the script's message before any build."""
    import sys

    try:
        for n in names:
            t = edits[n](*orig) if isinstance(orig, tuple) else edits[n](orig)
            if (t == orig) != (n == "full"):
                raise EditError(f"{n}: the copy {'differs from' if n == 'full' else 'equals'} the source")
            write(n, t)
    except EditError as err:
        sys.exit(f"{script}: edit failed, nothing built: {err}")
