"""`ckptbench operator` options: command line over environment over defaults."""

from __future__ import annotations

import pytest

from ckptbench.operator.runtime.main import Options, parse_args

DEFAULTS = Options((), 8080, 8081, None, "IfNotPresent", "INFO")


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, DEFAULTS),
        (
            ["--namespace", "a", "--namespace", "b", "--namespace", "a"],
            {},
            Options(("a", "b"), 8080, 8081, None, "IfNotPresent", "INFO"),
        ),
        (
            [],
            {"CKPTBENCH_OPERATOR_NAMESPACES": " a, ,b "},
            Options(("a", "b"), 8080, 8081, None, "IfNotPresent", "INFO"),
        ),
        (["--all-namespaces"], {"CKPTBENCH_OPERATOR_NAMESPACES": "a"}, DEFAULTS),
        (
            ["--namespace", "x"],
            {"CKPTBENCH_OPERATOR_NAMESPACES": "a"},
            Options(("x",), 8080, 8081, None, "IfNotPresent", "INFO"),
        ),
        (
            [],
            {"CKPTBENCH_OPERATOR_METRICS_PORT": "9000", "CKPTBENCH_OPERATOR_HEALTH_PORT": "9001"},
            Options((), 9000, 9001, None, "IfNotPresent", "INFO"),
        ),
        (
            ["--metrics-port", "7000"],
            {"CKPTBENCH_OPERATOR_METRICS_PORT": "9000"},
            Options((), 7000, 8081, None, "IfNotPresent", "INFO"),
        ),
        (
            [],
            {"CKPTBENCH_DEFAULT_IMAGE": "img:1", "CKPTBENCH_DEFAULT_IMAGE_PULL_POLICY": "Always"},
            Options((), 8080, 8081, "img:1", "Always", "INFO"),
        ),
        (
            ["--resync-seconds", "5"],
            {"CKPTBENCH_OPERATOR_RESYNC_SECONDS": "30"},
            Options((), 8080, 8081, None, "IfNotPresent", "INFO", resync_seconds=5.0),
        ),
        (
            [],
            {"CKPTBENCH_OPERATOR_RESYNC_SECONDS": "30"},
            Options((), 8080, 8081, None, "IfNotPresent", "INFO", resync_seconds=30.0),
        ),
        (
            ["--default-image", "img:2", "--log-level", "debug"],
            {"CKPTBENCH_DEFAULT_IMAGE": "img:1"},
            Options((), 8080, 8081, "img:2", "IfNotPresent", "DEBUG"),
        ),
        ([], {}, Options((), 8080, 8081, None, "IfNotPresent", "INFO", peering=None)),
        (
            ["--peering", "ckptbench", "--peering-lifetime", "15"],
            {"CKPTBENCH_OPERATOR_PEERING": "other"},
            Options(
                (),
                8080,
                8081,
                None,
                "IfNotPresent",
                "INFO",
                peering="ckptbench",
                peering_lifetime=15,
            ),
        ),
        (
            [],
            {
                "CKPTBENCH_OPERATOR_PEERING": "ops.ckptbench",
                "CKPTBENCH_OPERATOR_PEERING_LIFETIME": "9",
            },
            Options(
                (),
                8080,
                8081,
                None,
                "IfNotPresent",
                "INFO",
                peering="ops.ckptbench",
                peering_lifetime=9,
            ),
        ),
    ],
)
def test_options(argv: list[str], env: dict[str, str], expected: Options) -> None:
    assert parse_args(argv, env) == expected
    assert parse_args(argv, env).clusterwide is (not expected.namespaces)


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--metrics-port", "70000"], {}, "--metrics-port"),
        (["--health-port", "x"], {}, "--health-port"),
        ([], {"CKPTBENCH_OPERATOR_METRICS_PORT": "nope"}, "CKPTBENCH_OPERATOR_METRICS_PORT"),
        (
            [],
            {"CKPTBENCH_DEFAULT_IMAGE_PULL_POLICY": "Sometimes"},
            "CKPTBENCH_DEFAULT_IMAGE_PULL_POLICY",
        ),
        (["--namespace", "a", "--all-namespaces"], {}, "--all-namespaces"),
        (["--resync-seconds", "0"], {}, "--resync-seconds"),
        ([], {"CKPTBENCH_OPERATOR_RESYNC_SECONDS": "90000"}, "CKPTBENCH_OPERATOR_RESYNC_SECONDS"),
        (["--default-image-pull-policy", "Sometimes"], {}, "--default-image-pull-policy"),
        (["--peering", "Ckptbench"], {}, "--peering"),
        (["--peering", "-x"], {}, "--peering"),
        ([], {"CKPTBENCH_OPERATOR_PEERING": "a b"}, "CKPTBENCH_OPERATOR_PEERING"),
        (["--peering-lifetime", "1"], {}, "--peering-lifetime"),
        ([], {"CKPTBENCH_OPERATOR_PEERING_LIFETIME": "x"}, "CKPTBENCH_OPERATOR_PEERING_LIFETIME"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    argv: list[str], env: dict[str, str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv, env)
    assert exc.value.code == 2
    assert named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "env", "address", "url"),
    [
        ([], {}, "0.0.0.0", "http://0.0.0.0:8081/healthz"),
        (["--bind-address", "127.0.0.1"], {}, "127.0.0.1", "http://127.0.0.1:8081/healthz"),
        ([], {"CKPTBENCH_OPERATOR_BIND_ADDRESS": "::"}, "::", "http://[::]:8081/healthz"),
    ],
)
def test_the_endpoints_listen_where_told(
    argv: list[str], env: dict[str, str], address: str, url: str
) -> None:
    options = parse_args(argv, env)
    assert options.bind_address == address and options.health_url == url


def test_a_bind_address_that_is_not_an_address_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--bind-address", "everywhere"], {})
    assert exit_.value.code == 2
    assert "--bind-address: not an IP address: 'everywhere'" in capsys.readouterr().err
