"""The finding kinds: stable ids that users' CI depends on.

Add kinds; never rename or repurpose one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kind:
    id: str
    severity: str  # "error" | "warning" | "info"
    title: str
    explanation: str
    fix: str


KINDS: dict[str, Kind] = {
    k.id: k
    for k in (
        Kind(
            "passthrough-domain-change",
            "error",
            "a pass-through op claims a domain change",
            "A pass-through op (cat, view, permute, …) or an activation clamp copies integer codes: its "
            "output domain *is* its input domain. Its metadata claims another output domain, but no node "
            "converts the codes, so every consumer that trusts the claim misreads them (ExecuTorch Arm "
            "FoldAndAnnotateQParamsPass folding the requant after cat, pytorch/executorch#18999).",
            "Keep an explicit requantize after the op (qflow.repair inserts one) and let the op's output "
            "domain equal its input domain.",
        ),
        Kind(
            "requant-after-passthrough",
            "error",
            "a real requant follows a pass-through op",
            "In a Q/DQ graph, the quantize after a pass-through op changes the domain. The graph is right "
            "in float, but a fold pass that folds Q/DQ into the op (ExecuTorch Arm "
            "FoldAndAnnotateQParamsPass ≤ 1.5.1) makes the pass-through op claim a change it cannot make: "
            "the lowered program computes wrong numbers.",
            "Insert an explicit requant (a quantize/dequantize pair in the op's input domain before the "
            "existing quantize) so the fold keeps a dq→q pair, which lowers to a RESCALE; qflow.repair "
            "does this.",
        ),
        Kind(
            "requant-across-activation",
            "error",
            "a requant across an activation the target lowers as a code copy",
            "The quantize after a standalone relu / hardtanh / clamp changes the domain. The target lowers "
            "the activation as a clamp that copies codes (measured: the ExecuTorch Arm fold moves both "
            "domains onto the clamp, quantizes the bounds in the output domain and drops the requant), so "
            "the program computes wrong numbers.",
            "Keep an explicit requant after the activation in its input domain (qflow.repair inserts one), "
            "or let the activation's output share its input's domain.",
        ),
        Kind(
            "requant-carried",
            "info",
            "a requant the target drops is cancelled by a later one",
            "The quantize after a code copy changes the domain A → B and the target drops it (the codes "
            "stay in A), but nothing reads the codes as B: they pass through more code copies into a "
            "quantize back into A. The reference rounds and clips to B on the way; qflow proves that "
            "B clips no value the chain keeps, that its rounding moves no code of A, and that an "
            "activation's bounds, quantized in its output domain, are the right codes in A.",
            "Nothing to fix. To make the program plain, give the intermediate quantize the domain A.",
        ),
        Kind(
            "rounded-weight-scales",
            "info",
            "the backend stores weight scales at a lower precision",
            "XNNPACK keeps the scales of a blockwise (per group) weight as bfloat16 in its payload, so "
            "each weight it multiplies is the program's weight times bf16(scale) / scale, within 2^-8 "
            "(0.39 %) of it. Measured (torchao 8da4w linear, group 32, on the ExecuTorch runtime): the "
            "delegate's output differs from the quantized eager model's by 0.3 % of the output range, and "
            "equals the eager model's with bf16-rounded scales to 5e-7. A rounding, not a domain error.",
            "Nothing to fix. For weights XNNPACK computes with float32 scales use int8 per-channel weights "
            "(measured within float rounding); int4 weights keep bf16 scales even per channel (XNNPACK "
            "stores them as one group per row, measured).",
        ),
        Kind(
            "masked-by-constant",
            "info",
            "a branch no output depends on: it ends in an activation that is constant",
            "A relu / hardtanh / clamp reads a domain whose every code lies beyond one of its bounds (a "
            "relu after a tensor whose zero point is the top code), so it outputs one value whatever its "
            "input. Values that reach the outputs only through it cannot make them wrong; their requant "
            "obligations, which on this target would only make values wrong, are not needed.",
            "Nothing to fix for correctness. The branch computes a constant: remove it, or check that "
            "its calibration saw the data it was meant to.",
        ),
        Kind(
            "dropped-scale",
            "error",
            "the target applies only the zero points across this op",
            "The op's output domain has another scale than its input, but the target lowers the op with the "
            "zero points only (measured: TOSA NEGATE on the ExecuTorch Arm backend), so the scale change is "
            "silently dropped and every output is off by the ratio of the scales.",
            "Quantize the op's output in its input's scale and requantize after it (qflow.repair does), or "
            "share the input's observer with the output.",
        ),
        Kind(
            "domain-mismatch",
            "error",
            "a consumer declares a domain its producer does not produce",
            "The consumer reads its input as codes in one domain (or as real numbers) while the producer "
            "writes another. The numbers are silently wrong.",
            "Requantize on that edge (qflow.repair inserts the minimal set of requants).",
        ),
        Kind(
            "mixed-input-domains",
            "error",
            "the inputs of a pass-through op are in different domains",
            "cat/stack copy the codes of every input into one tensor with one domain. Inputs in "
            "different domains end up reinterpreted in the first input's domain (the Arm fold pass's "
            "_merge_qparams keeps the first input's qparams).",
            "Requantize the odd inputs into the common domain (qflow.repair picks the cheapest set).",
        ),
        Kind(
            "non-fuseable-activation",
            "error",
            "an activation is fused although its bounds cut inside the domain",
            "conv/linear → relu/hardtanh/clamp → quantize lowers to one rescale that saturates to the "
            "quantize's [qmin, qmax]. Dropping the activation is exact only when its bounds, quantized, do "
            "not cut inside that range (relu: zero_point == qmin). ExecuTorch Arm ≥ the 'fuse by setting "
            "qmin to zp' change fuses relu regardless and nothing enforces the narrowed qmin: negative "
            "values leak (measured on the TOSA reference model). The default Arm quantizer produces this "
            "whenever a fused relu's output domain is shared with a signed tensor (cat); 1.5.1 also fuses "
            "hardtanh(0, x) / nn.ReLU6 whenever x reaches the top of the domain. Severity warning: the "
            "installed pass does not fuse it, so it stays an explicit clamp, but the producer is left without "
            "an output domain of its own (seed 001's shape: the message says what the installed backend does "
            "with that, e.g. 1.5.1 fails on a linear producer). An error on cortex-m: CortexMQuantizer "
            "annotates add / sub / conv / linear with the activation, ActivationFusionPass declines it, and "
            "the producer stays an aten op on the codes (measured: sub → relu into a stack's domain, ~100 "
            "output LSB on the reference kernels).",
            "Give the activation its own domain with zero_point == qmin (and, for a bounded activation, "
            "its upper bound on qmax) and requantize into the shared domain after it: qflow.repair does.",
        ),
        Kind(
            "unenforced-narrow-range",
            "error",
            "a producer claims a narrowed code range that nothing enforces",
            "The op's output_qparams narrow [qmin, qmax] (an activation fused by moving qmin to the zero "
            "point), but its rescale saturates only to the dtype range: the values are not guaranteed to "
            "lie in the claimed domain.",
            "Keep the activation as a clamp, or requantize as for non-fuseable-activation.",
        ),
        Kind(
            "delegate-dtype-mismatch",
            "error",
            "a delegate input or output dtype differs between the partition and the parent graph",
            "A delegate boundary is a dtype edge: the dtype the backend writes must equal the dtype the "
            "parent graph declares for that executorch_call_delegate output. ExecuTorch copies the parent's "
            "meta['val'] from the partition's edge outputs before the backend runs; when a fold pass moves "
            "a dequantize into the partition (a partition ending in view/permute), the backend writes int8 "
            "while the parent still says float32 (seed 002): the runtime rejects the program, or float "
            "consumers read int8 codes as floats. Inputs likewise: the dtype the parent feeds to "
            "executorch_call_delegate must be the dtype the partition reads (its placeholder, the TOSA "
            "flatbuffer input, Vela's input element size). Status `predicted`: reported by "
            "predict_boundaries from the partitioner's tagging, before lowering.",
            "Make the boundary tell the truth: the delegate output is the integer dtype and a CPU "
            "dequantize with the partition's output qparams restores the float view. For an input: "
            "quantize on the CPU with the partition's input qparams (float fed to an integer input), or "
            "dequantize with the fed codes' qparams (integer fed to a float input); qflow.repair does both.",
        ),
        Kind(
            "annotated-factory-op",
            "error",
            "a constant/factory op is annotated for quantization",
            "Constant and factory producers (full, zeros, ones, scalar_tensor, …) are domain-free: the "
            "consumer decides their domain. Annotating one whose node has kwargs makes torchao < 0.16's "
            "prepare_pt2e assert 'expecting kwargs for aten op IR to be empty' (seed 003); newer torchao "
            "accepts it (reported as info).",
            "Do not annotate factory ops; let annotated consumers (cat, conv) and IO annotations place the observers.",
        ),
        Kind(
            "unknown-op",
            "warning",
            "an op qflow does not know stands in the way of a proof",
            "qflow never assumes an unknown op is an identity. Obligations whose domain flows through it "
            "are reported unproven, not proved.",
            "Register the op's class: qflow.ops.register('my_op', 'passthrough' | 'compute' | …).",
        ),
        Kind(
            "missing-domain",
            "warning",
            "a quantized op has no recorded output domain",
            "The op consumes integer codes but its output domain is not recorded, so nothing after it "
            "can be proved. Seed 001's shape (a conv/linear without output_qparams, its unfused activation "
            "with them) is the exception: the rescale targets the activation's domain and the clamp "
            "enforces the bounds, so qflow infers the producer's domain through the activation and warns, "
            "naming the passes that need it explicitly (RewriteConvPass: executorch ≤ 1.2 crashes; 1.5.1 "
            "handles a conv but not a decomposed linear).",
            "Give the producer an explicit output domain (a quantize after it).",
        ),
        Kind(
            "unvalidated-lowering",
            "warning",
            "an op whose lowering on the target has not been measured stands in the way of a proof",
            "Whether a program computes right on a backend depends on what the backend makes of each op, "
            "and qflow measures that against the real backend (the contract probe) instead of assuming it. "
            "This op is lowered on integer codes there, but its lowering at this activation dtype has not "
            "been measured, so qflow cannot vouch for what it computes: the program is unproven, never "
            "proved (Arm's int16 LayerNorm, GELU and SDPA decompositions miscompute while every domain in "
            "the program is consistent).",
            "Keep the op in float on that target (do not quantize it), or measure it: add a case to the "
            "contract probe (tests/contracts/) and, when it computes right, to the target's `validated` ops.",
        ),
        Kind(
            "miscompiled-lowering",
            "error",
            "an op whose lowering on the target was measured to compute wrong",
            "The contract probe ran this op's stock lowering on the real backend and it computed wrong "
            "numbers with no error: the program is consistent, the backend is not (measured: ExecuTorch "
            "1.5.1 lowers a torchao weight-only linear to XNNPACK with the raw weight codes as float "
            "weights, the scales dropped — outputs orders of magnitude off).",
            "Keep the op off that backend or quantize it another way (for XNNPACK: dynamic activations, "
            "Int8DynamicActivationIntxWeightConfig, which was measured right).",
        ),
        Kind(
            "ignored-op-variant",
            "warning",
            "an op whose variant the backend ignores: it computes the default variant instead",
            "The program asks for one variant of an op (an argument's value) and the backend computes "
            "another, with no error (measured: ExecuTorch 1.5.1's XNNPACK delegate computes "
            '`gelu(x, approximate="tanh")` as the exact GELU, up to 4.73e-4 off; fixed upstream by '
            "pytorch/executorch PR #22851). qflow follows that gap to the outputs: where no output depends "
            "on the op, or a quantize whose step is at least twice the gap rounds it away, it holds (info); "
            "anywhere else the program is unproven, never proved: an output it reaches unrounded is another "
            "function than the program's, by at most the gap times the gain on the way (wrong or not by "
            "your float tolerance), and through a quantization's rounding (a run-time or fine grid) whether "
            "an output moves beyond that rounding depends on the data.",
            'Use the variant the backend computes (`approximate="none"`), or a runtime with the fix.',
        ),
        Kind(
            "merged-duplicate-users",
            "error",
            "two users of one tensor that compute the same thing in different output domains",
            "The Arm backend merges users of one tensor with the same op and arguments after it folds the "
            "Q/DQ nodes (FuseDuplicateUsersPass, ExecuTorch 1.5.1), whatever their output domains: the later "
            "one's consumers then read the earlier one's codes, in the wrong domain, with no error (measured: "
            "two silu(x), one sharing a cat's domain — 190 output LSB off on the TOSA reference model).",
            "Compute it once: give both the same output domain (one node with two users), or break the "
            "duplication (a requantize of one shared result into each domain).",
        ),
        Kind(
            "bias-domain",
            "error",
            "a bias that is not in its op's accumulator domain",
            "A linear layer's or convolution's int32 bias must be in the accumulator's domain: the input "
            "scale times the weight scale (per channel), zero point 0. The fake-quantized program "
            "dequantizes the bias with whatever domain it declares; the backend adds its codes to the "
            "accumulator as they are (measured on the TOSA reference model: a linear layer whose input "
            "scale was changed after convert is 27-31 output LSB off). Qparams edited after convert, or a "
            "quantizer whose bias spec is not derived from the input and weight, do this.",
            "Derive the bias's quantization from the input and weight (a DerivedQuantizationSpec), or "
            "re-quantize the bias after editing the input's or the weight's scale.",
        ),
        Kind(
            "rounded-comparison",
            "warning",
            "a comparison of two grids whose mask the backend's rounding can flip",
            "The program compares the reals of two quantized operands. The Arm backend rescales both to int32 "
            "on the finer operand's scale (InsertRescalePass, ExecuTorch 1.5.1), rounding the coarser's codes "
            "onto it, and compares those: two codes less than a step of the finer grid apart can compare the "
            "other way, and whatever the mask selects there is the other branch (measured: a threshold in a "
            "2.1x coarser grid than the value it is compared with, one code flips, 115 output LSB off the "
            "fake-quantized model on the TOSA reference model). qflow finds such a pair of codes over the "
            "operands' ranges; whether the program's data reach it is not known: unproven.",
            "Quantize both operands of the comparison in one domain (share the qspec), or compare with a "
            "threshold that lies on the value's grid.",
        ),
        Kind(
            "rounded-twice",
            "warning",
            "a result the backend's own rounding puts one code off (a maximum / minimum of two grids rounded "
            "twice, an int16 conv / matmul rescaled with a 16-bit multiplier), where what follows amplifies it",
            "The program rounds max(a, b) once onto the output grid. The Arm backend rescales both operands to "
            "int32 on the finer operand's scale (InsertRescalePass, ExecuTorch 1.5.1) and the result onto the "
            "output's, so the coarser operand's value is rounded twice and can land one code off (within the "
            "op's contract). Where the ops after it make that one code more than one output LSB (a steep table "
            "such as a LayerNorm's rsqrt, an argmax, a comparison), the program is unproven (measured: mask "
            "campaign 00230-mk-arm-custom, a minimum one code off and the output 12 LSB off on the TOSA reference "
            "model). With int16 activations a conv / linear / matmul accumulates in INT48, which TOSA rescales with "
            "a 16-bit multiplier (scale32 false): the program's ratio within about 2^-15, one int16 code off over "
            "the output's range (transformer campaign 00057-tx-arm-a16w8: a linear's code times a relu of up to 8, "
            "8 output LSB).",
            "Quantize both operands of the maximum / minimum in one domain (share the qspec), or give its output "
            "the finer operand's scale; for an int16 conv / matmul, keep what follows from amplifying its codes "
            "(no product with a large operand, no steep table right after it).",
        ),
        Kind(
            "skipped-requant",
            "warning",
            "a consumer the backend computes on its producer's unrounded result",
            "The Arm backend computes add, sub, mul, sum, abs, maximum / minimum and the comparisons on "
            "int32 with a rescale before each operand and after the result; when one feeds another and the "
            "two rescales between them compose to 1.0, FuseConsecutiveRescalesPass (ExecuTorch 1.5.1) removes "
            "both: the consumer reads the exact int32 result, never rounded to the producer's declared domain "
            "nor clamped to its range. Up to half an LSB there, more where the clamp would have cut, and a "
            "steep op after it multiplies that (measured: x + c into a LayerNorm, 3-7 output LSB off the "
            "fake-quantized model on the TOSA reference model). With int16 activations RewriteConvPass does "
            "the same after a conv: an op computed on int32 reads the conv's accumulator rescaled straight to "
            "int32. qflow does not bound it: the program is unproven there. On the annotated graph the scales "
            "are not known yet: every pair whose two int32 scales are of one magnitude (sum → mul, add / sub "
            "→ add / sub, at int16 mul → add / sub) and every int16 conv an int32-computed op reads is unproven.",
            "Give the producer's output a domain whose scale differs from what the consumer rescales its "
            "operand to (the fusion needs the two to compose to exactly 1.0), or put a pass-through op between "
            "them; or accept the deviation if your tolerance allows it.",
        ),
        Kind(
            "skipped-clamp",
            "error",
            "a requant's clamp the backend skips, on inputs that drive the value past it",
            "With int16 activations (a16w8) the Arm backend's RewriteConvPass (ExecuTorch 1.5.1) feeds an op "
            "it computes on int32 (add, sub, sum, mean, abs, maximum / minimum, the comparisons, a LayerNorm's "
            "decomposition) straight from a conv's INT48 accumulator: the int16 requant the program declares "
            "after the conv, and its clamp to the int16 range, never happen there. qflow reports this error "
            "when it proves the clamp matters: the conv reads a program input, so the inputs of that domain "
            "drive it past the range exactly, and the op adds or subtracts a constant and is itself an output "
            "(measured: conv3x3 → sub, 1629 output LSB off the fake-quantized model on the TOSA reference "
            "model). Elsewhere the same fork is `skipped-requant`, unproven.",
            "Give the conv an output range its inputs cannot leave, or keep the conv's consumer at int8; "
            "or accept the backend's unclamped (closer to float) value if your tolerance allows it.",
        ),
        Kind(
            "table-interpolation",
            "error",
            "an int16 TOSA TABLE whose interpolation is more than 2 output LSB off the op it tabulates",
            "An int16 TABLE keeps 513 entries, one per 128 input codes, and TOSA interpolates linearly between "
            "them: every entry can be right (the check recomputes them) while a steep op is off in between "
            "(measured for the LayerNorm of the a16w8 campaign case: rsqrt up to 4798 output LSB off near "
            "zero, 10.5 at input code 1000). The check weighs it over the input codes the program reaches "
            "there (value ranges; a softmax's x - amax(x) is never positive, its row sums hold exp(0)): under "
            "2.5 LSB there (it writes codes at most 2 off), an info finding; beyond, for an op the contract probe "
            "measured off (exp, reciprocal, rsqrt, ...), an error with that bound, followed to the outputs like any "
            "other wrong code, and for one it measured right (sigmoid, tanh, GELU, SiLU) unproven; with no program "
            "to read the codes from (an artifact alone), unproven.",
            "Keep inputs away from the op's steep region (a larger epsilon before rsqrt), or keep the op at int8.",
        ),
        Kind(
            "kernel-argument-mismatch",
            "error",
            "a backend kernel's folded integer argument does not realise the declared domain",
            "Backends without a delegate (Cortex-M / CMSIS-NN) rewrite the program in place into kernels "
            "that take integers folded from the program's domains: zero points or offsets, requantize "
            "multiplier / shift pairs, activation bounds in codes. The fold records the domains it "
            "folded on the node (input_qparams / output_qparams); this integer does not realise them, so "
            "the kernel computes other numbers than the program declares, with no error (the bug class "
            "of ExecuTorch PR #19676: a linear that lost its offset terms).",
            "Find the pass that computed the argument (the message names the kernel and the argument) "
            "and keep the declared domains and the folded integers in step.",
        ),
        Kind(
            "reference-needed",
            "warning",
            "a .pte (or a lowered program) needs the program it was lowered from to be proved",
            "A .pte checked alone carries what it computes, but not every domain: a TOSA payload keeps its "
            "weights (and biases) as bare integer codes, whose scales live only in the PT2E program the .pte "
            "was lowered from, and a Cortex-M .pte keeps each kernel's folded integers but not the domains "
            "they were folded from. What depends on them is unproven, never proved, until that program is "
            "given (a Cortex-M .pte that no lowering of the given program matches stays unproven).",
            "Pass the program the .pte was lowered from: `qflow check model.pte --reference model.pt2` "
            "(API: `qflow.analyze('model.pte', reference=exported_program_or_pt2_path)`).",
        ),
        Kind(
            "unread-delegate-argument",
            "warning",
            "a delegate is passed a constant tensor its payload never reads",
            "The program hands a delegate a constant (a weight's scales or zero points, a bias) that the "
            "backend's payload does not read: the delegate computes without it, and the .pte does not say "
            "whether it mattered. (When they tile a float weight the payload multiplies, one per output "
            "channel or group, they are its scales and the finding is `miscompiled-lowering`: measured, "
            "ExecuTorch 1.5.1 and torchao 0.18, a torchao weight-only linear lowered to XNNPACK passes its "
            "scales unread and computes 1e2 to 2e11 times off, with no error.)",
            "Check the program the .pte was lowered from (`qflow check` on the exported program names the "
            "linear), or quantize with a config the backend runs (8da4w / 8da8w on XNNPACK).",
        ),
        Kind(
            "unwritten-delegate-output",
            "error",
            "a delegate output its payload never writes",
            "The delegate call returns a tensor that no output of the backend's payload writes: the program "
            "reads whatever that buffer held before (zeros, or a stale tensor). Measured, ExecuTorch 1.5.1: "
            "XNNPACK's partitioner takes the dequantizes of an mm's two activation operands into the delegate "
            "before it and leaves the mm on the CPU; the payload never writes the first operand, so the mm reads "
            "zeros (stock XNNPACKQuantizer, `mm(q(x), k(x))`), with no error.",
            "Keep the consumer in the delegate or out of the quantized region (for the mm: `q(x) @ k(x).T` is "
            "lowered right), or lower that part to another backend.",
        ),
        Kind(
            "float-weight-codes",
            "info",
            "a weight-only quantized layer a .pte computes in float",
            "A linear / mm / convolution on the CPU multiplies by a float32 constant whose values are all "
            "int8 (or int4) codes: the weight-only quantization's cast was constant-folded (ExecuTorch's LLM "
            "export with qmode=int8 delegates none of it, measured 2026-11-26), so the .pte stores 4 bytes per "
            "code and computes in float. A constant per-channel scale multiplying the output realises the "
            "dequantize (info); with no scale after the product the finding is a warning: unproven.",
            "Nothing to fix if the size is acceptable; for int8 weights that run on integer kernels lower "
            "with a config the backend delegates (8da4w / 8da8w on XNNPACK).",
        ),
        Kind(
            "real-constant-on-codes",
            "error",
            "an op the target runs on integer codes uses a constant in real units",
            "The backend folds the dequantize before an op into it but neither lowers it to a kernel nor "
            "rewrites its constants into codes: the portable kernel compares the integer codes with a "
            "threshold as written (a real number), or codes of two different domains with each other, or "
            "clamps them to an activation's real bounds. The finding names the codes where the result "
            "differs (measured, stock CortexMQuantizer, ExecuTorch 1.5.1: `where(x > 0, x, y)` 122 output "
            "LSB, tests/contracts/; a hardtanh after a linear that has another user, so "
            "ActivationFusionPass does not fuse it and QuantizedClampActivationPass skips it as its input "
            "is not int8 yet: every code off, tests/test_cortex_m.py). An activation's wrong codes are "
            "followed to the outputs: the finding says how far they move them, and holds where none moves "
            "beyond its rounding. On the annotated graph it is a warning "
            "at every activation: which ones the passes leave on codes is decided by the calibrated program.",
            "Keep the op in float (leave it out of the quantizer's annotation), or make it fuse: an "
            "activation whose bounds span its output's code range and whose producer has no other user; "
            "a threshold that is exact in codes (0 with zero point 0).",
        ),
        Kind(
            "payload-weight-mismatch",
            "error",
            "the delegate payload's quantized weight is not the program's",
            "A weighted node's weight in the XNNPACK payload (its codes, and its per-tensor, per-channel or "
            "per-group scales in the named data beside the flatbuffer) is read as XNNPACK reads it and "
            "compared with the weight the program dequantizes: other scales (beyond the payload's storage "
            "of them: bfloat16 for groups), another group size, a dropped zero point or other codes is "
            "another layer, computed without an error. Unproven: the payload's scales are in named data "
            "the program does not carry.",
            "Find the lowering step that wrote it (the finding names the XNNPACK node and the program's "
            "node) and report it upstream; keep the layer on the CPU until it is fixed.",
        ),
        Kind(
            "tosa-artifact-mismatch",
            "error",
            "the TOSA flatbuffer the backend emitted does not realise the declared domains",
            "Read by TOSA 1.0 INT semantics, an operator of the delegate's flatbuffer (a RESCALE's "
            "multiplier/shift/zero points, a conv's zero points, a CLAMP's bounds, a TABLE's entries, a "
            "PAD constant, a zero-point-only NEGATE/AVG_POOL2D) or a delegate edge puts codes in another "
            "domain than the PT2E program declares: the device computes wrong numbers whatever the graph "
            "checks predicted. Unproven: the artifact holds an operator or a constant qflow cannot read.",
            "Find the pass that broke it (qflow check --arm SPEC --per-pass) and fix the quantized program "
            "or the backend; the finding names the TOSA operator, its index and the PT2E node.",
        ),
    )
}


def kind(kind_id: str) -> Kind:
    try:
        return KINDS[kind_id]
    except KeyError:
        raise KeyError(f"unknown finding kind {kind_id!r}; known kinds: {', '.join(sorted(KINDS))}") from None
