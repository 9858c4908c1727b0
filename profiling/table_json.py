"""Rebuilt dispatch tables as a KBITCUPY_DISPATCH_TABLE file: the families' file lists
(profiling/retune_tables.py) with sweeps overlaid last, written as JSON {family: entry}, so that a device run
can measure the re-tuned dispatch before the tables are pasted into kbitcupy/dispatch.py.
  python3 profiling/table_json.py OUT.json [--extra +TAG ...] FAMILY ...
(the TAG sweeps must be in profiling/results/ as <gpu>_<date>_TAG.json)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import retune_tables as RT  # noqa: E402


def _key(k):
    return ",".join(str(x) for x in k) if isinstance(k, tuple) else str(k)


def _value(v):
    if isinstance(v, dict):
        return {_key(k): _value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [list(b) for b in v]
    return v


def main(argv):
    out = argv[0]
    extra = [argv[i + 1] for i, a in enumerate(argv) if a == "--extra"]
    fams = [a for i, a in enumerate(argv[1:], 1) if not a.startswith("--") and argv[i - 1] != "--extra"]
    data = {}
    for fam in fams:
        entry, _ = RT.build(fam, extra)
        data[fam] = {name: ({_key(s): list(v) for s, v in val.items()} if name == "shapes" else _value(val))
                     for name, val in entry.items()}
    with open(out, "w") as f:
        json.dump(data, f, indent=1)
    print(f"{out}: {', '.join(fams)}")


if __name__ == "__main__":
    main(sys.argv[1:])
