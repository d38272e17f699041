//go:build lizard_runsc_gen

// This file joins package gvisor.dev/gvisor/runsc/fsgofer/filter/config in
// build.sh's copy of the pinned gVisor module, to reach its unexported
// optionsToPrecompile.

package config

import (
	"fmt"
	"slices"

	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp"
	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
)

// LizardPrecompiledPrograms is gVisor's PrecompiledPrograms for the gofer,
// all of them (32, a second of CPU).
func LizardPrecompiledPrograms() ([]precompiledseccomp.Program, error) {
	return PrecompiledPrograms()
}

// LizardCheck checks that programs are the filters the gofer builds at
// runtime: each, rendered with this process's PID, must equal instruction
// for instruction the program Install builds from Rules with the same
// options. Run in another process than the one that precompiled them, it
// catches a value the rules take from that process without declaring it a
// variable.
func LizardCheck(programs []precompiledseccomp.Program) error {
	opts := optionsToPrecompile()
	if len(programs) != len(opts) {
		return fmt.Errorf("%d seccomp programs for %d options", len(programs), len(opts))
	}
	for _, opt := range opts {
		i := slices.IndexFunc(programs, func(p precompiledseccomp.Program) bool { return p.Name == opt.ConfigKey() })
		if i < 0 {
			return fmt.Errorf("no seccomp program for %v", opt.ConfigKey())
		}
		program := programs[i]
		// RenderInstructions writes into the program's bytecode.
		program.Bytecode32 = slices.Clone(program.Bytecode32)
		got, err := program.RenderInstructions(opt.Vars())
		if err != nil {
			return fmt.Errorf("rendering the seccomp program for %v: %w", opt.ConfigKey(), err)
		}
		rules, denyRules := Rules(opt)
		want, _, err := (&seccomp.Program{
			RuleSets: []seccomp.RuleSet{
				{Rules: denyRules},
				{Rules: rules, Action: seccomp.Allow},
			},
		}).Build()
		if err != nil {
			return fmt.Errorf("building the seccomp program for %v: %w", opt.ConfigKey(), err)
		}
		if !slices.Equal(bpf.ToBytecode(got), bpf.ToBytecode(want)) {
			return fmt.Errorf("the precompiled seccomp program for %v (%d instructions) differs from the one built at runtime (%d instructions)", opt.ConfigKey(), len(got), len(want))
		}
	}
	return nil
}
