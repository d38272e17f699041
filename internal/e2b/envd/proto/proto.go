// Package proto holds the protobuf definitions of E2B's in-sandbox daemon
// (envd) that Lizard serves, and the Go code generated from them:
// process/ and filesystem/ (messages), with processconnect/ and
// filesystemconnect/ (Connect handlers) below them.
package proto

//go:generate go run ./gen
