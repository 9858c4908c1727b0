"""Every instantiation of every kernel family compiles with NVRTC (no GPU needed), without spills."""
import pytest

from kbitcupy._compile import compile_all, format_report


@pytest.mark.parametrize("arch", ["sm_90", "sm_89", "sm_80"])
def test_compile_all(arch):
    records = compile_all(arch)
    print(format_report(records))
    assert records, "no kernels compiled"
    from kbitcupy._compile import applicable_families

    expected = sum(len(f.instances) for f in applicable_families(arch).values())
    assert len(records) == expected, f"{len(records)} reports for {expected} instantiations"
    spills = [r for r in records if r.get("spill_stores", 0) or r.get("spill_loads", 0)]
    assert not spills, "spills:\n" + format_report(spills)
    assert all(r.get("registers", 0) > 0 for r in records)
