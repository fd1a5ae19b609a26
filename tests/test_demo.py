"""The command line, `python -m jointdyn {list,demo}`, run as a user would run it."""

import re
import subprocess
import sys

import jointdyn as jd


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jointdyn", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _residual(stdout: str) -> float:
    match = re.search(r"max \|rnea\(q, v, aba\(q, v, tau\)\) - tau\| = (\S+)", stdout)
    assert match, stdout
    return float(match.group(1))


def test_list():
    out = _run("list")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == list(jd.list_models())


def test_help():
    out = _run("--help")
    assert out.returncode == 0, out.stderr
    assert "demo" in out.stdout and "list" in out.stdout


def test_demo_default_model():
    out = _run("demo", "--batch", "8", "--repeats", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout
    assert "model    quadruped: nq=19 nv=18" in lines
    assert "bodies   trunk," in lines
    assert "backend  " in lines
    assert "dtype    float32, batch 8" in lines
    assert re.search(r"compile  [\d.]+ s", lines), lines
    assert re.search(r"us per sample, [\d,]+ samples/s", lines), lines
    match = re.search(
        r"with jd.batched\(aba\), [\d.]+x jit\(vmap\(aba\)\); same vdot to (\S+)", lines
    )
    assert match, lines
    assert float(match.group(1)) < 1e-3  # float32: the same states through both layouts
    assert "(finite: True)" in lines
    assert _residual(lines) < 1e-2  # float32
    assert re.search(r"centre of mass \[.*\] m, total energy T \+ U = -?[\d.]+ J", lines), lines
    # the drop simulation: the feet carry the weight of every quadruped at the end
    assert re.search(r"simulate 8 quadrupeds dropped on the ground, 8000 steps of 0.5 ms: ", lines)
    carried = re.search(r"the feet carry ([\d.]+)-([\d.]+) of the weight .*finite: True", lines)
    assert carried, lines
    assert 0.9 < float(carried.group(1)) <= float(carried.group(2)) < 1.1
    assert "at rest below 5 cm/s: True" in lines, lines  # they come to rest


def test_demo_float64():
    out = _run("demo", "--model", "double_pendulum", "--batch", "4", "--dtype", "float64")
    assert out.returncode == 0, out.stderr
    assert "model    double_pendulum: nq=2 nv=2" in out.stdout
    assert "dtype    float64, batch 4" in out.stdout
    assert _residual(out.stdout) < 1e-9


def test_demo_unknown_model():
    out = _run("demo", "--model", "no_such_robot")
    assert out.returncode != 0
    assert "no_such_robot" in out.stderr
    for name in jd.list_models():
        assert name in out.stderr


PENDULUM_MJCF = """
<mujoco>
  <worldbody>
    <body name="upper">
      <joint name="shoulder" axis="0 1 0" damping="0.1" armature="0.05"/>
      <geom type="capsule" size="0.05" fromto="0 0 0 0 0 -0.5"/>
      <body name="lower" pos="0 0 -0.5">
        <joint name="elbow" axis="0 1 0"/>
        <geom type="capsule" size="0.04" fromto="0 0 0 0 0 -0.4"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def test_demo_mjcf(tmp_path):
    path = tmp_path / "pendulum.xml"
    path.write_text(PENDULUM_MJCF)
    out = _run("demo", "--mjcf", str(path), "--batch", "4", "--dtype", "float64")
    assert out.returncode == 0, out.stderr
    assert f"model    {path}: nq=2 nv=2 nbodies=2" in out.stdout
    assert "bodies   upper, lower" in out.stdout
    assert _residual(out.stdout) < 1e-9
    bad = _run("demo", "--mjcf", str(tmp_path / "missing.xml"))
    assert bad.returncode == 2 and "missing.xml" in bad.stderr, bad.stderr
