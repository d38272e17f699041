// Command lizard-client is the lizard CLI without the server: only the
// commands that talk to the API. Every sandbox gets it as
// /usr/local/bin/lizard, so that code inside can use its lizardToken; it
// links no server code (internal/cli/deps_test.go).
package main

import "github.com/lizard-build/lizard/internal/cli"

func main() { cli.Main() }
