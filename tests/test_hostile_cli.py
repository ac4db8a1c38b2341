"""What ``ckptbench run``'s help and options promise, taken at their word (issue 33)."""

from __future__ import annotations

import pytest

from ckptbench.workload.contract.settings import declared
from ckptbench.workload.local.options import from_setting, option

# A switch that turns a true default off does the opposite of what its setting's description
# (written for the CRD field) says; its help once repeated that description.
SWITCH_HELP = {
    "--no-verify": "Skip verifying",
    "--force": "Run even when",
    "--keep-cache": "Backend file: leave the written files in the node's page cache",
    "--no-checksums": "Backend gcs: skip crc32c",
}


@pytest.mark.parametrize("flag", list(SWITCH_HELP))
def test_a_switch_that_turns_a_default_off_says_what_it_does(flag: str) -> None:
    assert option(flag).help.startswith(SWITCH_HELP[flag]), option(flag).help


def test_every_switch_that_turns_a_true_default_off_has_its_own_help() -> None:
    switches = [d for d in declared() if d.field.default is True]
    assert {d.flag for d in switches} == set(SWITCH_HELP)
    for d in switches:
        assert d.setting.switch, f"{d.flag}: no switch help; the description says the opposite"
        assert from_setting(d).help.startswith(d.setting.switch), d.flag
