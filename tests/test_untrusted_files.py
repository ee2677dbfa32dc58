"""Files a user hands to servegym (sweep YAML, a model folder's run.json) and env ids from anywhere never
import code, never make servegym read a file the user did not name, and fail with one line and exit
status 2. The reproductions run the real ``servegym`` command in a subprocess, where the exit status and
the absence of a traceback are what a user sees."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servegym.agents.run_file import parse_run_file
from servegym.agents.sweep import parse_sweep

import servegym  # noqa: F401  (registers the ids)
from servegym.env_ids import check_env_id
from servegym.errors import ConfigError
from servegym.safe_yaml import MAX_YAML_DEPTH, parse_yaml

PD = "servegym/PDProvision-v0"
SECRET = "TOP-SECRET-LINE-do-not-print"
EVIL_MODULE = "import pathlib\npathlib.Path(__file__).with_name('PWNED').write_text('ran')\n"


def _cli(args: list[str], cwd: Path, timeout: float = 120.0) -> tuple[int, str]:
    """Run ``servegym ARGS`` in ``cwd`` as a user would; (exit status, stderr + stdout)."""
    proc = subprocess.run([sys.executable, "-m", "servegym.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, (proc.stderr + proc.stdout).strip()


def _one_line(rc: int, out: str) -> str:
    assert rc == 2, out
    assert "Traceback" not in out, out
    assert len(out.splitlines()) == 1, out
    return out


# --------------------------------------------------------------------------- env ids


def test_module_prefix_in_a_sweep_file_is_never_imported(tmp_path: Path) -> None:
    (tmp_path / "pwnmod.py").write_text(EVIL_MODULE)
    (tmp_path / "sweep.yml").write_text('env: "pwnmod:Evil-v0"\npolicies: [min-power]\nseeds: [0]\n')
    rc, out = _cli(["sweep", "sweep.yml", "--workers", "1", "--out", str(tmp_path / "r.csv")], cwd=tmp_path)
    assert "env = 'pwnmod:Evil-v0' names a module to import" in _one_line(rc, out)
    assert not (tmp_path / "PWNED").exists()
    assert not (tmp_path / "r.csv").exists()


def test_module_prefix_in_run_json_and_on_the_command_line_is_never_imported(tmp_path: Path) -> None:
    (tmp_path / "pwnmod.py").write_text(EVIL_MODULE)
    (tmp_path / "model.zip").write_bytes(b"not read: run.json fails first")
    (tmp_path / "run.json").write_text(json.dumps({"env_id": "pwnmod:Evil-v0", "algo": "ppo"}))
    rc, out = _cli(["evaluate", "--model", "model.zip"], cwd=tmp_path)
    line = _one_line(rc, out)
    assert "run.json: env_id names a module to import" in line and "pwnmod" not in line  # nothing of it quoted
    rc, out = _cli(["benchmark", "--env", "pwnmod:Evil-v0", "--policy", "naive"], cwd=tmp_path)
    assert "--env = 'pwnmod:Evil-v0' names a module to import" in _one_line(rc, out)
    assert not (tmp_path / "PWNED").exists()


@settings(max_examples=60, deadline=None)
@given(module=st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,20}", fullmatch=True), name=st.text(max_size=20))
def test_no_module_prefix_is_imported(module: str, name: str) -> None:
    before = set(sys.modules)
    if module == "servegym":
        return  # this package's own prefix, already imported: checked below
    with pytest.raises(ConfigError, match="names a module to import") as info:
        check_env_id(f"{module}:{name}", "env")
    assert len(str(info.value).splitlines()) == 1
    assert set(sys.modules) == before


def test_registered_ids_pass_and_servegym_prefix_is_dropped() -> None:
    assert check_env_id(PD) == PD
    assert check_env_id(f"servegym:{PD}") == PD
    assert check_env_id("CartPole-v1") == "CartPole-v1"  # Gymnasium's own, registered by gymnasium itself
    for bad in ("servegym/NoSuch-v0", "", None, 3, ["x"], "x" * 1000):
        with pytest.raises(ConfigError, match="allowed: servegym/GeoRoute-v0"):
            check_env_id(bad, "env")


# --------------------------------------------------------------------------- run.json


def _model_dir(tmp_path: Path, run_text: str | bytes) -> Path:
    (tmp_path / "model.zip").write_bytes(b"not read: run.json fails first")
    f = tmp_path / "run.json"
    f.write_bytes(run_text if isinstance(run_text, bytes) else run_text.encode())
    return f


def test_run_json_cannot_make_servegym_read_and_print_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret.csv"
    secret.write_text(SECRET + "\n")
    run = {"env_id": "servegym/GeoRoute-v0", "algo": "ppo", "env_kwargs": {"geo": {"trace": str(secret)}}}
    _model_dir(tmp_path, json.dumps(run))
    rc, out = _cli(["evaluate", "--model", "model.zip"], cwd=tmp_path)
    assert "run.json: env_kwargs.geo.trace" in _one_line(rc, out) and "names a file" in out
    assert SECRET not in out
    for path in ("secret.csv", "./secret.csv", "/etc/shadow", "~/.ssh/id_rsa", "x.json", "a\\b"):
        run["env_kwargs"] = {"geo": {"profile": path}}
        with pytest.raises(ConfigError, match=r"env_kwargs\.geo\.profile names a file") as info:
            parse_run_file(_model_dir(tmp_path, json.dumps(run)))
        assert SECRET not in str(info.value)


def test_a_file_the_user_names_on_the_command_line_may_appear_in_run_json(tmp_path: Path) -> None:
    f = _model_dir(tmp_path, json.dumps({"env_id": "servegym/GeoRoute-v0", "algo": "ppo",
                                         "env_kwargs": {"geo": {"trace": "/data/my.csv", "lengths": "azure-conv"}}}))
    with pytest.raises(ConfigError, match=r"geo\.trace names a file"):
        parse_run_file(f)
    run = parse_run_file(f, {"geo": {"trace": "/data/my.csv"}})
    assert run["env_kwargs"]["geo"]["trace"] == "/data/my.csv"
    # shipped data by name is always fine
    _model_dir(tmp_path, json.dumps({"env_kwargs": {"geo": {"trace": "azure-code", "profile":
                                                            "llama3.1-8b_a100-40gb_tp1"}}}))
    assert parse_run_file(f)["env_kwargs"]["geo"]["trace"] == "azure-code"
    # and by its installed path
    from importlib import resources

    shipped = str(resources.files("servegym.envs.data").joinpath("traces", "azure_code.csv.gz"))
    _model_dir(tmp_path, json.dumps({"env_kwargs": {"geo": {"trace": shipped}}}))
    assert parse_run_file(f)["env_kwargs"]["geo"]["trace"] == shipped


BAD_RUNS = [
    ('{"env_id": "servegym/PDProvision-v0", "algo": ', "not valid JSON"),
    ("[1, 2, 3]", "a JSON list, not an object"),
    (b"\xff\xfe\x00\x01binary", "not UTF-8 text"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ('{"algo": 3}', "algo (int) is not allowed"),
    ('{"env_kwargs": "geo"}', "env_kwargs (str) is not allowed"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_RUNS[:2], ids=["truncated", "list"])
def test_bad_run_json_is_one_line_from_the_cli(tmp_path: Path, text: str | bytes, expected: str) -> None:
    _model_dir(tmp_path, text)
    rc, out = _cli(["evaluate", "--model", "model.zip"], cwd=tmp_path)
    assert expected in _one_line(rc, out)


@pytest.mark.parametrize(("text", "expected"), BAD_RUNS, ids=[e.split()[0] for _, e in BAD_RUNS])
def test_bad_run_json_fields(tmp_path: Path, text: str | bytes, expected: str) -> None:
    with pytest.raises(ConfigError, match=r"run\.json: ") as info:
        parse_run_file(_model_dir(tmp_path, text))
    assert expected in str(info.value) and len(str(info.value)) < 400


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
RUN_KEYS = st.sampled_from(["env_id", "algo", "env_kwargs", "eval_seeds", "hyperparams", "seed", "baselines",
                            "references", "eval_history", "baseline_eval", "other"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=st.dictionaries(RUN_KEYS, JSON, max_size=5) | JSON)
def test_any_run_json_is_a_checked_dict_or_one_line(tmp_path: Path, doc) -> None:
    f = _model_dir(tmp_path, json.dumps(doc))
    try:
        run = parse_run_file(f)
    except ConfigError as exc:
        assert len(str(exc).splitlines()) == 1 and str(exc).startswith(str(f))
        return
    assert isinstance(run, dict) and set(run) <= {"env_id", "algo", "env_kwargs", "eval_seeds", "hyperparams",
                                                  "seed", "baselines", "references", "eval_history", "baseline_eval"}


# --------------------------------------------------------------------------- YAML


def _laughs(where: str) -> str:
    """A billion-laughs sweep file: 9 levels of 9 aliases each (9^9 strings once expanded) inside ``where``."""
    levels = ['&a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"&{n} [" + ", ".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    bomb = "[" + ", ".join(levels) + "]"
    if where == "name":
        return f"name: {bomb}\nenv: {PD}\npolicies: [min-power]\n"
    return f"env: {PD}\nscenarios: [{{name: s, env_kwargs: {{junk: {bomb}}}}}]\npolicies: [min-power]\n"


@pytest.mark.parametrize("where", ["name", "env_kwargs"])
def test_billion_laughs_fails_fast(tmp_path: Path, where: str) -> None:
    text = _laughs(where)
    assert len(text) < 2000 and "&i [" in text  # a few hundred bytes, 9^9 nodes expanded
    with pytest.raises(ConfigError, match="nodes once its aliases are expanded"):
        parse_yaml(text, "sweep.yml")


def test_small_aliases_still_load() -> None:
    # rl-zoo3 style merges: anchors and aliases within the budget work as in yaml.safe_load
    text = "base: &b {n_steps: 64, gamma: 0.99}\nppo:\n  <<: *b\n  n_envs: 4\n"
    assert parse_yaml(text, "hp.yml") == yaml.safe_load(text)


def test_yaml_from_the_cli_is_one_line(tmp_path: Path) -> None:
    cases = {"binary.yml": (b"\x00\xff\xfe" + bytes(range(256)), "not UTF-8 text"),
             "deep.yml": (("env: " + "[" * 5000 + "]" * 5000 + "\n").encode(), f"nested more than {MAX_YAML_DEPTH} "
                          "levels")}
    for name, (data, expected) in cases.items():
        (tmp_path / name).write_bytes(data)
        rc, out = _cli(["sweep", name, "--workers", "1"], cwd=tmp_path)
        assert expected in _one_line(rc, out), out


def test_python_tags_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML: could not determine a constructor"):
        parse_yaml("env: !!python/object/apply:os.system ['touch PWNED']\n", "tag.yml")
    assert not Path("PWNED").exists()


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!,'\"\n #|>?%@`\t1.")), max_size=80))
def test_any_yaml_text_is_a_document_or_one_line(text: str) -> None:
    try:
        parse_yaml(text, "f.yml")
    except ConfigError as exc:
        assert len(str(exc).splitlines()) == 1 and str(exc).startswith("f.yml: ")


def test_sweep_file_paths_must_stay_in_its_folder(tmp_path: Path) -> None:
    inside = tmp_path / "traces" / "mine.csv"
    doc = {"env": "servegym/GeoRoute-v0", "policies": ["rr"],
           "scenarios": [{"name": "s", "env_kwargs": {"config": {"geo": {"trace": "/etc/shadow"}}}}]}
    with pytest.raises(ConfigError, match=r"scenarios\[0\]\.env_kwargs\.config\.geo\.trace = '/etc/shadow' names a "
                                          r"file.*sweep config's folder"):
        parse_sweep(doc, base_dir=tmp_path, source="sweep.yml")
    doc["scenarios"][0]["env_kwargs"]["config"]["geo"]["trace"] = str(inside)
    cfg = parse_sweep(doc, base_dir=tmp_path, source="sweep.yml")
    assert cfg.scenarios[0].env_kwargs["config"]["geo"]["trace"] == str(inside)


def test_sweep_names_are_short_strings() -> None:
    with pytest.raises(ConfigError, match=r"sweep\.yml: name = \[\[1, 2\]\] \(list\)"):
        parse_sweep({"name": [[1, 2]], "env": PD, "policies": ["min-power"]}, source="sweep.yml")


def test_hyperparameter_file_paths_must_stay_in_its_folder(tmp_path: Path) -> None:
    from servegym.agents.hparams import load_hyperparams

    hp = tmp_path / "hp.yml"
    hp.write_text("ppo:\n  n_steps: 64\n  env_kwargs: {geo: {trace: /etc/shadow}}\n")
    with pytest.raises(ConfigError, match=r"hp\.yml: env_kwargs\.geo\.trace = '/etc/shadow' names a file"):
        load_hyperparams("servegym/GeoRoute-v0", "ppo", hp)
    hp.write_text(f"ppo:\n  n_steps: 64\n  env_kwargs: {{geo: {{trace: {tmp_path / 'mine.csv'}}}}}\n")
    assert load_hyperparams("servegym/GeoRoute-v0", "ppo", hp).env_kwargs["geo"]["trace"] == str(tmp_path / "mine.csv")


def test_env_kwargs_on_the_command_line_are_bounded(capsys) -> None:
    from servegym.cli import main

    assert main(["train", "--env", PD, "--env-kwargs", "[" * 100_000]) == 2
    err = capsys.readouterr().err.strip()
    assert "nested too deeply" in err and len(err) < 300 and len(err.splitlines()) == 1


def test_bare_names_are_files_only_under_keys_that_take_files(tmp_path: Path, monkeypatch) -> None:
    from servegym.file_refs import check_file_refs

    monkeypatch.chdir(tmp_path)
    (tmp_path / "shadow").write_text(SECRET)
    (tmp_path / "energy").write_text("a file that happens to share a config value's name")
    with pytest.raises(ConfigError, match=r"env_kwargs\.geo\.trace = 'shadow' names a file"):
        check_file_refs({"geo": {"trace": "shadow"}}, "run.json: env_kwargs", "a model folder's run.json")
    check_file_refs({"config": {"objective": "energy", "trace": "azure-code"}}, "run.json: env_kwargs", "x")
