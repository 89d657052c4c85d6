"""Runs a snippet in a fresh Python process that imports only what it names (a served export
read without keras_ctx).
"""

import os
import subprocess
import sys
import textwrap


def run_isolated(code):
    """Runs `code` in a new interpreter and checks it never imported our code.

    (`import tensorflow` itself loads parts of an installed keras, so keras is
    not checked; keras_ctx and keras_hub must not be needed to serve.)
    """
    check = textwrap.dedent(
        """
        import sys
        used = sorted(m for m in sys.modules
                      if m.split(".")[0] in ("keras_ctx", "keras_hub"))
        assert not used, "the serving process imported " + ", ".join(used[:5])
        """
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code) + check],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
