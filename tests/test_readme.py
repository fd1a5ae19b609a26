"""The README's Python examples run as written."""

import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has no Python example"
    namespace: dict = {}
    exec(compile("\n".join(blocks), str(README), "exec"), namespace)  # noqa: S102
    assert namespace["vdot"].shape == (namespace["model"].nv,)
    assert namespace["J"].shape == (6, namespace["model"].nv)
    trajs = namespace["trajs"]  # the quadruped drops: finite, on the manifold, landed
    assert trajs.q.shape == (3, 401, 19) and np.all(np.isfinite(trajs.q))
    np.testing.assert_allclose(np.linalg.norm(trajs.q[:, :, :4], axis=-1), 1.0, atol=1e-5)
    assert np.all(trajs.contact_forces[:, -1, :, 2].sum(-1) > 0)
