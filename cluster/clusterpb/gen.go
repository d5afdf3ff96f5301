// Package clusterpb holds the protobuf messages of dsh's cluster protocol:
// what members send a session grain, and its replies. The code in
// cluster.pb.go is generated from cluster.proto and committed, so a build
// needs no protoc.
package clusterpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative cluster.proto
