// --unity-search on the bundled 2-layer MLP, on 2 x 2 slow devices joined by fast links (where
// parallelism pays even for tiny tensors), with the search tests' rules. The report goes to
// stderr, the plan to stdout; every op of the plan carries a machine view and the module
// records the machine. (On these slow devices ZeRO data parallelism and the search's own 3-D
// plans, among the plans it weighs, beat Megatron's layout: their update is smaller; a 3-D plan
// records its schedule and each op's stage.)

// RUN: unityc-opt %examples/mlp.mlir --unity-search --machine %S/../../search/Inputs/slow_devices.toml --rules %S/../../search/Inputs/search.rules --report %t.json 2>%t.err | filecheck %s --check-prefix=PLAN
// RUN: filecheck %s --check-prefix=REPORT < %t.err
// RUN: filecheck %s --check-prefix=JSON < %t.json

// PLAN:       builtin.module attributes {unityc.machine = "{{.*}}slow_devices.toml"} {
// PLAN:         %x = pcg.input key "x" {view = #pcg.view<start 0, [{{.*}}]>{{(, stage = 0 : i64)?}}}
// PLAN:         pcg.linear {{.*}} {view = #pcg.view<start 0, [{{.*}}]>{{(, stage = 0 : i64)?}}}
// PLAN-NOT:     = pcg.{{[a-z_]+}} {{[^{]*}}: !pcg
// PLAN:         func.return

// REPORT:      unity-search: slow-devices: 2 nodes, 4 devices (4x slow)
// REPORT-NEXT: cost model: roofline, optimizer: sgd
// REPORT-NEXT: search: 1 segment(s), 1 searched, 0 reused; {{[0-9]+}} candidates priced, {{[0-9]+}} dropped by bound, {{[0-9]+}} expanded; {{.*}} s
// REPORT:      plan ({{.*}}): iteration time {{[0-9.]+}} us (forward {{.*}}, backward {{.*}}, gradient sync + update {{.*}})
// REPORT-NEXT: memory per device: peak {{.*}} KiB on device {{[0-9]}} of 1.00 GiB (fits); lowest {{.*}}; 4 device(s) used
// REPORT-NEXT: roofline bound: {{.*}}; plan / bound = {{[0-9.]+}}x
// REPORT-NEXT: estimated MFU: {{[0-9]+\.[0-9]}}% (6 x {{[0-9,]+}} parameters x 16 tokens per iteration over 4 device(s) at {{.*}}FLOP/s peak in all)
// REPORT:      baselines (same cost model):
// REPORT-NEXT:   baseline {{ +}} iteration  peak memory  MFU  plan speedup
// REPORT-NEXT:   data-parallel  4-way {{.*}} {{[0-9]+\.[0-9]}}% {{.*}} fits
// REPORT-NEXT:   megatron       data 2 x tensor 2 {{.*}} fits
// REPORT:      mapping summary:
// REPORT-NEXT:   op {{ +}}count  parallel configurations of its task space (ops)  devices
// REPORT:        pcg.linear {{ +}}2 {{ +}}shard [{{[24]}}, {{.*}}4-4

// JSON:      "devices": 4,
// JSON:      "source":
// JSON:      "search": {
// JSON:        "segments": 1,
// JSON:      "plan": {
// JSON-NEXT:   "iteration_s": {{[0-9.e-]+}},
// JSON:        "fits": true,
// JSON:        "mfu": {{[0-9.e-]+}}
// JSON:      "utilization": {
// JSON-NEXT:   "parameters": {{[0-9]+}},
// JSON-NEXT:   "tokens": 16,
// JSON:      "memory_per_device": [
// JSON:      "baselines": {
// JSON-NEXT:   "data-parallel": {
// JSON:        "megatron": {
// JSON:      "mapping": [

// The report's iteration time is what the estimate pass says of the emitted plan.
// RUN: unityc-opt %examples/mlp.mlir --unity-search --machine %S/../../search/Inputs/slow_devices.toml --rules %S/../../search/Inputs/search.rules --baselines none -o %t.plan.mlir 2>%t.err
// RUN: unityc-opt %t.plan.mlir -p 'estimate{machine="%S/../../search/Inputs/slow_devices.toml"}' 2> %t.est
// RUN: cat %t.err %t.est | filecheck %s --check-prefix=SAME
// SAME: plan ({{.*}}): iteration time [[T:[0-9.]+ [a-z]+]] (
// SAME: iteration time: [[T]] (
