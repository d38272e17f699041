// Command lizard is the Lizard server (`lizard serve`, `api`, `node`, `admin`)
// and its command-line client.
package main

import (
	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/daemon"
)

func main() { cli.Main(daemon.Commands()...) }
