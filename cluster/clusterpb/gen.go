// Package clusterpb holds the protobuf messages of dsh's cluster protocol:
// what members send a session grain, and its replies. The code in
// dshcluster.pb.go is generated from dshcluster.proto (a file name of its
// own: protoactor registers "cluster.proto") and committed, so a build
// needs no protoc.
package clusterpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative dshcluster.proto
