"""Taking a model apart: everything here works on any model of `transformer_lab.nn` through its hook
points and the interface the models share (no Lightning; matplotlib only in `transformer_lab.figures`).

explain.py         attention maps, rollout, gradient-weighted attention, per-head statistics
interventions.py   head ablation, activation patching
lens.py            logit lens, direct logit attribution
faithfulness.py    deletion curves: which explanation finds what the output uses (and, on an answer key,
                   which finds the positions it reads)
measures.py        per-head measures, registered once (entropy, alignment, ablation, induction, ...):
                   every tool, the `heads/` callback, the dynamics and the page iterate the registry
circuits/          the computational graph, the metrics, the patcher, one module per method (eap,
                   eap_ig, patching, acdc) behind one signature and a registry; evaluation on the answer
                   keys; evidence (estimates checked by exact patching, intervals, stability)
intervals.py       bootstrap intervals over examples (the same resamples for every statistic)
events.py          phase changes: the one rule (large, beyond the noise, sudden, kept) and half-way steps
dynamics.py        every measure over a run's snapshots, its events
seeds.py           the same over runs that differ only by their seed: in how many, median [range]
induction.py       induction and previous-token scores, the repeat gain
grokking.py        Nanda et al.'s progress measures (key frequencies, restricted and excluded loss)
arguments.py       what every function accepts (a model or a checkpoint; a tensor or a tuple)
"""
