"""`transformer_lab.interventions` is `transformer_lab.analysis.interventions`, its home since the package
was laid out by what each part does; this name stays for code and configs written before."""

import sys

from transformer_lab.analysis.interventions import *  # noqa: F403  (linters and editors see the names)

sys.modules[__name__] = sys.modules["transformer_lab.analysis.interventions"]
