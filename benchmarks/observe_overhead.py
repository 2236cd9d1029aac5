"""What observe mode adds to a lowering, per Arm partition: the old capture against the new.

    python benchmarks/observe_overhead.py [MODEL ...]      # qflow.examples.models names

Before, `--qflow-observe` deep-copied each partition right after the Arm fold
pass (weights included) and read the copy after the test; now it reads the
partition's domain graph in place (`observe._graphs_after_fold`). For each
partition of a real lowering (the TOSA partitioner on the example models) this
times, in one process: the deep copy, the in-place read, the proof, and the
observed record's JSON (what the plugin writes per test). CPU seconds, best of 3.
"""

from __future__ import annotations

import copy
import json
import sys
import time

from measure import best_cpu

from qflow.analysis import analyze_graph
from qflow.api import domain_graph
from qflow.examples import models
from qflow.integrations.observe import Program, TestRecord
from qflow.targets.arm import pipeline as arm

DEFAULT = ["conv_bn_relu6_residual", "attention", "mixed_a16w8"]


def main(names: list[str]) -> None:
    rows = []
    for name in names:
        ex = models.MODELS[name]()
        q = ex.make_quantizer() if ex.make_quantizer else arm.default_quantizer(ex.spec)
        converted = arm.quantize(ex.model, ex.inputs, ex.spec, quantizer=q)
        t0 = time.process_time()
        with arm.capture_after() as parts:
            arm.lower(converted, ex.inputs, ex.spec)
        lower_s = time.process_time() - t0
        for i, ep in enumerate(parts):
            copy_s = best_cpu(lambda ep=ep: copy.deepcopy(ep))
            read_s = best_cpu(lambda ep=ep: domain_graph(ep))
            dg = domain_graph(ep)
            prove_s = best_cpu(lambda dg=dg: analyze_graph(dg))
            rec = TestRecord(name, [Program("partition", f"{name}[{i}]", 0.0, analyze_graph(dg))])
            json_s = best_cpu(lambda rec=rec: json.dumps(rec.to_json(), indent=2))
            rows.append((f"{name}[{i}]", len(ep.graph.nodes), lower_s, copy_s, read_s, prove_s, json_s))
    print(
        "| partition | FX nodes | lowering CPU s (whole model) | deepcopy s (before) | read in place s (now) "
        "| prove s | record JSON s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| `{r[0]}` | {r[1]} | {r[2]:.2f} | {r[3]:.4f} | {r[4]:.4f} | {r[5]:.4f} | {r[6]:.4f} |")


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
