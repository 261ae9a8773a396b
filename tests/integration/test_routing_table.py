"""Routing tables: grammar, errors at load, shipped tables, FLAGOS_* variables read at import."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import routing

ROOT = Path(torch_fl.__file__).resolve().parent.parent
CONFIGS = Path(torch_fl.__file__).resolve().parent / "configs"


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter importing this checkout's torch_fl."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_OP_", "FLAGOS_LOG"))}
    full.pop("FLAGOS_BACKEND_CONFIG", None)
    full.pop("FLAGOS_STRICT", None)
    full["PYTHONPATH"] = os.pathsep.join([str(ROOT), full.get("PYTHONPATH", "")])
    full.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full,
        cwd=ROOT,
        timeout=240,
    )


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# ---- grammar ----


def test_lines_comments_includes_and_later_lines_win(tmp_path):
    write(tmp_path, "sub/base.conf", "relu = flagos_python\nmm = flagos_python\n")
    main = write(
        tmp_path,
        "main.conf",
        """
        # a comment line
        include sub/base.conf   # relative to this file
        add.Tensor = flagos_python
        aten::mul.Tensor=cpu_fallback
        relu.default = cpu_fallback  # later lines win
        """,
    )
    entries = routing.parse_table(main)
    ops = [(op, route) for op, route, *_ in entries]
    assert ops == [
        ("aten::relu", "flagos_python"),
        ("aten::mm", "flagos_python"),
        ("aten::add.Tensor", "flagos_python"),
        ("aten::mul.Tensor", "cpu_fallback"),
        ("aten::relu", "cpu_fallback"),
    ]
    assert entries[0][2].endswith("sub/base.conf") and entries[0][3] == 1
    assert entries[-1][3] == 6


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("add.Tensor cpu_fallback", "malformed line"),
        ("add.Tensor = = cuda", "malformed line"),
        ("add..Tensor = cpu_fallback", "malformed operator name"),
        ("= cpu_fallback", "malformed operator name"),
        ("add.Tensor = gpu", "unknown route 'gpu'; valid routes: cpu_fallback, cuda, "),
        ("add.Tensor =", "unknown route ''"),
        ("no_such_op.Tensor = cpu_fallback", "has no operator 'aten::no_such_op'"),
        ("add.NoSuchOverload = cpu_fallback", "overloads of aten::add: Scalar, Scalar_out,"),
        ("include", "malformed include"),
        # size rules
        (
            "relu [numel >= 10, numel < 5] = cpu_fallback",
            "match no call (no numel is both >= 10 and <= 4)",
        ),
        (
            "relu [dtype = float17] = cpu_fallback",
            "unknown dtype 'float17' in 'dtype = float17'; valid dtypes: bool, uint8,",
        ),
        ("relu [numel >= 10 = cpu_fallback", "'[' without a closing ']'"),
        ("relu [] = cpu_fallback", "empty condition; conditions are 'numel <|<=|>|>= <integer>'"),
        ("relu [numel >= 1,] = cpu_fallback", "empty condition"),
        ("relu [numel == 5] = cpu_fallback", "numel compares with <, <=, > or >="),
        ("relu [numel >= -5] = cpu_fallback", "non-negative decimal integer below 2**63"),
        ("relu [numel >= 99999999999999999999] = cpu_fallback", "below 2**63"),
        ("relu [numel >= 1__0] = cpu_fallback", "non-negative decimal integer"),
        ("relu [numel < 0] = cpu_fallback", "match no call"),
        ("relu [dtype = float16|] = cpu_fallback", "unknown dtype ''"),
        ("relu [dtype float16] = cpu_fallback", "write 'dtype = <dtype>[|<dtype>...]'"),
        ("relu [dtype = float16, dtype = float32] = cpu_fallback", "dtype is given twice"),
        ("relu [shape > 3] = cpu_fallback", "unknown condition 'shape > 3'"),
        ("relu [numel >= 5] cpu_fallback", "expected '<op>.<overload> [<conditions>] = <route>'"),
        (
            "relu [numel >= 5] = cpu_fallback = x",
            "expected '<op>.<overload> [<conditions>] = <route>'",
        ),
        ("relu [numel >= 5] = gpu", "unknown route 'gpu'; valid routes: cpu_fallback"),
        ("rellu [numel >= 5] = cpu_fallback", "has no operator 'aten::rellu'"),
    ],
)
def test_errors_name_file_line_text_and_choices(tmp_path, line, expected):
    path = write(tmp_path, "bad.conf", f"# header\nrelu = cpu_fallback\n{line}\n")
    with pytest.raises(RuntimeError) as err:
        routing.parse_table(path)
    message = str(err.value)
    assert f"{path}:3:" in message
    assert expected in message
    assert f"3 | {line}" in message


def test_include_cycle_is_an_error(tmp_path):
    write(tmp_path, "a.conf", "include b.conf\n")
    write(tmp_path, "b.conf", "relu = cpu_fallback\ninclude a.conf\n")
    with pytest.raises(RuntimeError, match=r"b\.conf:2: include cycle: .*a\.conf -> .*b\.conf -> "):
        routing.parse_table(tmp_path / "a.conf")


def test_missing_include_is_an_error(tmp_path):
    path = write(tmp_path, "main.conf", "include nowhere.conf\n")
    with pytest.raises(RuntimeError, match=r"main\.conf:1: cannot read included file .*nowhere"):
        routing.parse_table(path)


def test_include_depth_is_limited(tmp_path):
    for i in range(12):
        write(tmp_path, f"d{i}.conf", f"include d{i + 1}.conf\n")
    write(tmp_path, "d12.conf", "relu = cpu_fallback\n")
    with pytest.raises(RuntimeError, match="includes nested deeper than 8 files"):
        routing.parse_table(tmp_path / "d0.conf")


def test_missing_table_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="cannot read routing table"):
        routing.parse_table(tmp_path / "absent.conf")


def test_unavailable_routes_name_the_switch(tmp_path):
    path = write(tmp_path, "t.conf", "relu = flaggems_cpp\n")
    with pytest.raises(
        RuntimeError, match=r"t\.conf:1: aten::relu = flaggems_cpp: .*FLAGOS_BUILD_FLAGGEMS_CPP=1"
    ):
        routing.parse_table(path)
    # Names are still valid: the parse-only mode accepts the line.
    assert routing.parse_table(path, check_available=False)[0][:2] == ("aten::relu", "flaggems_cpp")


@pytest.mark.skipif(torch_fl.build_config.ACCELERATOR != "cpu", reason="cpu accelerator build")
def test_cuda_route_on_cpu_accelerator_names_the_accelerator(tmp_path):
    path = write(tmp_path, "t.conf", "mm = cuda\n")
    with pytest.raises(
        RuntimeError, match="needs the cuda or dcu accelerator.*FLAGOS_ACCELERATOR=cpu"
    ):
        routing.parse_table(path)


@pytest.mark.parametrize("name", ["cpu", "cuda", "dcu", "flaggems"])
def test_shipped_tables_are_valid(name):
    path = CONFIGS / f"backends_{name}.conf"
    assert path.is_file()
    entries = routing.parse_table(path, check_available=False)
    if name == "dcu":
        pinned = {op for op, route, *_ in entries if route == "cuda"}
        assert pinned == {
            "aten::silu_backward",
            "aten::slice_backward",
            "aten::_conj",
            "aten::relu",
            "aten::relu_",
            "aten::mm",
            "aten::bmm",
            "aten::mse_loss",
            "aten::transpose.int",
        }


def test_table_in_force_follows_the_build_record():
    table = routing.active_table()
    assert table["loaded"]
    assert Path(table["path"]) == routing.table_path_for(torch_fl.build_config)
    assert "build record" in table["origin"]


def test_table_choice_by_accelerator():
    class Record:
        ACCELERATOR = "cuda"
        BUILD_FLAGGEMS = True

    assert routing.table_path_for(Record).name == "backends_flaggems.conf"
    Record.BUILD_FLAGGEMS = False
    assert routing.table_path_for(Record).name == "backends_cuda.conf"
    Record.ACCELERATOR = "dcu"
    assert routing.table_path_for(Record).name == "backends_dcu.conf"


# ---- at import (fresh interpreters) ----


def test_backend_config_variable_selects_a_table(tmp_path):
    path = write(tmp_path, "exp.conf", "relu = flagos_python\n")
    r = run_python(
        """
        import torch_fl
        from torch_fl import routing
        t = routing.active_table()
        print(t["path"], t["origin"], routing.get_route("relu"), routing.route_origin("relu"))
        """,
        FLAGOS_BACKEND_CONFIG=str(path),
    )
    assert r.returncode == 0, r.stderr
    assert f"{path} FLAGOS_BACKEND_CONFIG flagos_python table {path}:1" in r.stdout


@pytest.mark.parametrize("what", ["missing", "directory"])
def test_unreadable_backend_config_names_the_variable(tmp_path, what):
    path = tmp_path / "absent.conf" if what == "missing" else tmp_path
    r = run_python("import torch_fl", FLAGOS_BACKEND_CONFIG=str(path))
    assert r.returncode != 0
    why = "does not exist" if what == "missing" else "is not a file"
    assert f"FLAGOS_BACKEND_CONFIG='{path}'" in r.stderr and why in r.stderr, r.stderr[-2000:]


def test_unreadable_table_says_why(tmp_path):
    with pytest.raises(RuntimeError, match="absent.conf': no such file"):
        routing.load_table(tmp_path / "absent.conf")
    with pytest.raises(RuntimeError, match="it is a directory"):
        routing.load_table(tmp_path)
    included = write(tmp_path, "inc.conf", "include missing.conf\n")
    with pytest.raises(RuntimeError, match="missing.conf': no such file"):
        routing.load_table(included)


def test_bad_table_fails_the_import(tmp_path):
    path = write(tmp_path, "exp.conf", "relu = cpu_fallback\nrelu = warp_drive\n")
    r = run_python("import torch_fl", FLAGOS_BACKEND_CONFIG=str(path))
    assert r.returncode != 0
    assert f"{path}:2: unknown route 'warp_drive'" in r.stderr
    assert "relu = warp_drive" in r.stderr


def test_env_overrides_listed_or_not(tmp_path):
    path = write(tmp_path, "exp.conf", "mul.Tensor = flagos_python\n")
    r = run_python(
        """
        import torch_fl
        from torch_fl import routing
        for op in ["add.Tensor", "mul.Tensor", "_foreach_add_.List", "__and__.Tensor", "relu"]:
            print(op, routing.get_route(op), routing.route_origin(op))
        """,
        FLAGOS_BACKEND_CONFIG=str(path),
        FLAGOS_OP_add__Tensor="flagos_python",
        FLAGOS_OP_mul__Tensor="cpu_fallback",
        FLAGOS_OP__foreach_add___List="flagos_python",
        FLAGOS_OP___and____Tensor="flagos_python",
        FLAGOS_OP_relu="flagos_python",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "add.Tensor flagos_python env FLAGOS_OP_add__Tensor"
    assert lines[1] == "mul.Tensor cpu_fallback env FLAGOS_OP_mul__Tensor"
    assert lines[2] == "_foreach_add_.List flagos_python env FLAGOS_OP__foreach_add___List"
    assert lines[3] == "__and__.Tensor flagos_python env FLAGOS_OP___and____Tensor"
    assert lines[4] == "relu flagos_python env FLAGOS_OP_relu"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"FLAGOS_OP_add__Tensor": "gpu"}, "FLAGOS_OP_add__Tensor=gpu: unknown route 'gpu'; valid"),
        (
            {"FLAGOS_OP_add__Tensor": "flaggems_cpp"},
            "FLAGOS_OP_add__Tensor=flaggems_cpp: route "
            "'flaggems_cpp' needs a build with FLAGOS_BUILD_FLAGGEMS_CPP=1",
        ),
        ({"FLAGOS_OP_no_such_op": "cpu_fallback"}, "FLAGOS_OP_no_such_op: 'no_such_op' names no"),
        # An operator without its overload, or with a wrong one: its overloads are listed.
        ({"FLAGOS_OP_add": "cpu_fallback"}, "; overloads of aten::add: Scalar, Scalar_out, Tensor"),
        (
            {"FLAGOS_OP_add__Tensr": "cpu_fallback"},
            "; overloads of aten::add: Scalar, Scalar_out, Tensor",
        ),
        (
            {"FLAGOS_LOG": "dispatch,verbose"},
            "FLAGOS_LOG='dispatch,verbose': unknown value 'verbose'",
        ),
        ({"FLAGOS_STRICT": "maybe"}, "FLAGOS_STRICT='maybe' is not a boolean"),
    ],
)
def test_bad_variables_are_errors_naming_them(monkeypatch, env, expected):
    # The same load that `import torch_fl` runs, in this process: it reads every variable and
    # fails before changing anything.
    table = routing.active_table()
    before = (torch_fl._C._routing_log_flags(), bool(routing.strict(None)), routing.overrides())
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError) as err:
        torch_fl._C._routing_load(table["path"], table["origin"])
    assert expected in str(err.value)
    after = (torch_fl._C._routing_log_flags(), bool(routing.strict(None)), routing.overrides())
    assert after == before


def test_bad_variable_fails_the_import():
    r = run_python("import torch_fl", FLAGOS_OP_add__Tensor="gpu")
    assert r.returncode != 0
    assert "FLAGOS_OP_add__Tensor=gpu: unknown route 'gpu'; valid routes: " in r.stderr


def test_dispatch_log_once_and_every_call():
    code = """
        import torch, torch_fl
        a = torch.ones(4, device="flagos")
        for _ in range(3):
            b = a + a
        """
    line = f"[flagos dispatch] aten::add.Tensor -> {routing.get_route('aten::add.Tensor')}"
    r = run_python(code, FLAGOS_LOG="dispatch")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(line) == 1
    r = run_python(code, FLAGOS_LOG="dispatch_all")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(line) == 3


def test_strict_variable_is_read_at_import():
    r = run_python("import torch_fl; print(bool(torch_fl.routing.strict(None)))", FLAGOS_STRICT="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def test_info_command():
    r = run_python(
        "import runpy; runpy.run_module('torch_fl.info', run_name='__main__')",
        FLAGOS_OP_relu="flagos_python",
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"ACCELERATOR = {torch_fl.build_config.ACCELERATOR!r}" in out
    assert f"devices: {torch.flagos.device_count()}" in out
    assert f"routing table: {routing.table_path_for(torch_fl.build_config)}" in out
    assert "operators per route" in out
    # The table's own flagos_python operators (the FlagGems table has some), and relu.
    table_count = routing.route_counts().get("flagos_python", 0)
    assert routing.get_route("aten::relu") != "flagos_python"
    assert f"flagos_python: {table_count + 1}" in out
    assert "aten::relu -> flagos_python (FLAGOS_OP_relu)" in out


@pytest.mark.parametrize(
    "text, shown",
    [
        (b"rel\xffu = cpu_fallback\n", r"rel\xffu = cpu_fallback"),  # not UTF-8
        (
            b"\xef\xbb\xbfrelu = cpu_fallback\n",
            r"\ufeffrelu = cpu_fallback",
        ),  # an invisible byte-order mark
        (b"relu = cpu_fallback\x00\n", r"relu = cpu_fallback\x00"),  # a NUL ended the message
    ],
)
def test_stray_bytes_are_shown_escaped_with_file_and_line(tmp_path, text, shown):
    path = tmp_path / "bytes.conf"
    path.write_bytes(b"# first line\n" + text)
    with pytest.raises(RuntimeError) as err:
        routing.load_table(path)
    message = str(err.value)
    assert f"{path}:2: " in message and shown in message
    assert message.rstrip().endswith(shown)  # the line itself is echoed, escaped


def test_long_lines_are_cut_between_characters(tmp_path):
    path = tmp_path / "long.conf"
    path.write_text("relu = " + "é" * 300 + "\n", encoding="utf-8")
    with pytest.raises(RuntimeError) as err:
        routing.load_table(path)  # the message decodes: no character is cut in two
    assert str(err.value).rstrip().endswith("é...")


def test_stray_bytes_in_variables_are_shown_escaped():
    # os.environb carries the byte as is; Python's own decoding of os.environ escapes it.
    code = (
        "import os, sys, torch\n"
        "try:\n"
        "    import torch_fl\n"
        "except RuntimeError as e:\n"
        "    sys.stdout.buffer.write(str(e).encode('ascii', 'backslashreplace'))\n"
    )
    full = {k.encode(): v.encode() for k, v in os.environ.items()}
    full = {k: v for k, v in full.items() if not k.startswith((b"FLAGOS_OP_", b"FLAGOS_LOG"))}
    full.pop(b"FLAGOS_BACKEND_CONFIG", None)
    full.pop(b"FLAGOS_STRICT", None)
    full[b"PYTHONPATH"] = str(ROOT).encode()
    full[b"TORCH_DEVICE_BACKEND_AUTOLOAD"] = b"0"
    for name, value, shown in [
        (b"FLAGOS_OP_relu", b"cpu\xff", r"FLAGOS_OP_relu=cpu\xff: unknown route 'cpu\xff'"),
        (b"FLAGOS_STRICT", b"on\xff", r"FLAGOS_STRICT='on\xff' is not a boolean"),
        (b"FLAGOS_LOG", b"all\xff", r"FLAGOS_LOG='all\xff'"),
    ]:
        r = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            env={**full, name: value},
            cwd=ROOT,
            timeout=240,
        )
        assert shown in r.stdout.decode(), (name, r.stdout, r.stderr[-2000:])


def test_load_table_without_a_path_goes_back_to_the_import_time_choice(tmp_path):
    for name, line in (("a", "relu = cpu_fallback\n"), ("b", "add.Tensor = cpu_fallback\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "t.conf").write_text(line)
    # The relative path is resolved against the directory of the import.
    code = (
        "import os, torch_fl\n"
        "from torch_fl import routing\n"
        "first = routing.active_table()['path']\n"
        f"os.chdir({str(tmp_path / 'b')!r})\n"
        "os.environ['FLAGOS_BACKEND_CONFIG'] = '/no/such/table.conf'\n"
        "routing.load_table('t.conf')\n"
        "assert routing.active_table()['path'] != first\n"
        "routing.load_table()\n"
        "print('BACK', routing.active_table()['path'] == first, first)\n"
    )
    full = {k: v for k, v in os.environ.items() if not k.startswith(("FLAGOS_OP_", "FLAGOS_LOG"))}
    full.update(PYTHONPATH=str(ROOT), FLAGOS_BACKEND_CONFIG="t.conf")
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=full,
        cwd=tmp_path / "a",
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"BACK True {tmp_path / 'a' / 't.conf'}" in r.stdout
