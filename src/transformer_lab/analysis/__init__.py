"""Taking a model apart: everything here works on any model of `transformer_lab.nn` through its hook
points and the interface the models share (no Lightning; matplotlib only in `transformer_lab.figures`).

explain.py         attention maps, rollout, gradient-weighted attention, per-head statistics
interventions.py   head ablation, activation patching
lens.py            logit lens, direct logit attribution
faithfulness.py    deletion curves: which explanation finds what the output uses (and, on an answer key,
                   which finds the positions it reads)
circuits.py        the computational graph; eap, eap_ig, exact patching and acdc; faithfulness of circuits
arguments.py       what every function accepts (a model or a checkpoint; a tensor or a tuple)
"""
