// Package pytorchddp holds gangway's PyTorch DDP example, train.py, and
// the end-to-end test that runs it the way gangway does: one process per
// rank, configured only by the launch contract's environment, killed
// part-way and resumed from its newest committed checkpoint. There is no
// Go code here besides that test; it imports only the standard library.
package pytorchddp
