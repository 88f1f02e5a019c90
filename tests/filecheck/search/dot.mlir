// -t dot draws a plan: ops coloured by device group, parallel ops as hexagons, sources as
// ellipses, a legend of the device groups; edges labelled with tensor shapes.

// RUN: unityc-opt %examples/mlp_tensor_parallel.mlir -t 'dot{machine="cpu:2"}' | filecheck %s

// CHECK:      digraph plan {
// CHECK:        n{{[0-9]+}} [label="input\nx\n1\ndevices 0", shape=ellipse, fillcolor="[[SOLO:#[0-9a-f]+]]"];
// CHECK:        n{{[0-9]+}} [label="weight\nfc1.weight\nshard [2, 1]\ndevices 0,1", shape=ellipse, fillcolor="[[PAIR:#[0-9a-f]+]]"];
// CHECK:        n{{[0-9]+}} [label="replicate\ncopy 2\ndevices 0,1", shape=hexagon, fillcolor="[[PAIR]]"];
// CHECK:        n{{[0-9]+}} -> n{{[0-9]+}} [label="16x32", fontsize=8];
// CHECK:        n{{[0-9]+}} [label="linear\nshard [1, 2]\ndevices 0,1", shape=box, fillcolor="[[PAIR]]"];
// CHECK:        subgraph cluster_legend {
// CHECK:          g0 [label="devices 0", shape=box, fillcolor="[[SOLO]]"];
// CHECK:          g1 [label="devices 0,1", shape=box, fillcolor="[[PAIR]]"];
