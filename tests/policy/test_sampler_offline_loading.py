"""Loading the policy the sampler runs: offline, and without hidden side effects.

Importing `tripod.policy.models` used to set `HF_HUB_OFFLINE` and another variable in the
process environment. Offline loading is now explicit (`local_files_only=True` on every load),
so the import must leave `os.environ` untouched and loading must still need no hub.
"""

from __future__ import annotations

import os
import subprocess
import sys

# What models.py imports is imported first: what *those* set (importing transformers' model
# classes sets TORCHINDUCTOR_CACHE_DIR) is not tripod's doing.
_SCRIPT = """
import os
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
import tripod.core.paths
before = dict(os.environ)
import tripod.policy.models as models
assert dict(os.environ) == before, sorted(set(os.environ) ^ set(before))
policy = models.load_policy("tiny")
assert dict(os.environ) == before, sorted(set(os.environ) ^ set(before))
print("ok", policy.eos_token_ids)
"""


def test_import_and_load_leave_the_environment_alone():
    env = {k: v for k, v in os.environ.items()
           if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                        "TRANSFORMERS_NO_ADVISORY_WARNINGS")}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("ok")
