//go:build lizard_runsc_gen

// This file joins package gvisor.dev/gvisor/runsc/boot/filter/config in
// build.sh's copy of the pinned gVisor module, to reach its unexported
// optionsToPrecompile and rules.

package config

import (
	"fmt"
	"slices"

	"gvisor.dev/gvisor/pkg/bpf"
	"gvisor.dev/gvisor/pkg/seccomp"
	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
)

// LizardPlatform is the only platform Lizard runs runsc on
// (internal/sandbox/gvisor: --platform=systrap).
const LizardPlatform = "systrap"

// lizardOptions are the options of gVisor's optionsToPrecompile a Lizard
// sandbox can start with: the systrap platform with each network and
// filesystem variant, no GPU, TPU or RDMA proxy. gVisor's full list (576
// programs over 4 platforms and the device proxies) takes ~75 CPU-seconds
// to compile here and makes a 19 MB Go file; a Sentry started with options
// left out finds no program under its key and builds its filter at start,
// as every Sentry did before.
func lizardOptions() ([]Options, error) {
	opts, err := optionsToPrecompile()
	if err != nil {
		return nil, err
	}
	opts = slices.DeleteFunc(opts, func(opt Options) bool {
		return opt.Platform.ConfigKey() != LizardPlatform || opt.NVProxy || opt.TPUProxy || opt.RDMAProxy
	})
	if len(opts) == 0 {
		return nil, fmt.Errorf("no options to precompile on platform %q", LizardPlatform)
	}
	return opts, nil
}

// LizardPrecompiledPrograms is PrecompiledPrograms for lizardOptions.
func LizardPrecompiledPrograms() ([]precompiledseccomp.Program, error) {
	opts, err := lizardOptions()
	if err != nil {
		return nil, err
	}
	var programs []precompiledseccomp.Program
	for _, opt := range opts {
		var varNames []string
		for name := range opt.Vars() {
			varNames = append(varNames, name)
		}
		program, err := precompiledseccomp.Precompile(opt.ConfigKey(), varNames, func(vars precompiledseccomp.Values) *seccomp.Program {
			rules, denyRules := rules(opt, vars)
			return sentryProgram(opt, rules, denyRules)
		})
		if err != nil {
			return nil, fmt.Errorf("precompiling the seccomp program for %v: %w", opt.ConfigKey(), err)
		}
		programs = append(programs, program)
	}
	return programs, nil
}

// LizardCheck checks that programs are the filters the Sentry builds at
// runtime: each, rendered with this process's variables (its PID, the
// platform's values, a controller FD), must equal instruction for
// instruction the program Install builds from Rules and SeccompOptions
// with the same options. Run in another process than the one that
// precompiled them, it catches a value the rules take from that process
// without declaring it a variable.
func LizardCheck(programs []precompiledseccomp.Program) error {
	opts, err := lizardOptions()
	if err != nil {
		return err
	}
	if len(programs) != len(opts) {
		return fmt.Errorf("%d seccomp programs for %d options", len(programs), len(opts))
	}
	for _, opt := range opts {
		i := slices.IndexFunc(programs, func(p precompiledseccomp.Program) bool { return p.Name == opt.ConfigKey() })
		if i < 0 {
			return fmt.Errorf("no seccomp program for %v", opt.ConfigKey())
		}
		program := programs[i]
		// A controller FD that is none of the stand-ins Precompile used.
		opt.ControllerFD = 7
		// RenderInstructions writes into the program's bytecode.
		program.Bytecode32 = slices.Clone(program.Bytecode32)
		got, err := program.RenderInstructions(opt.Vars())
		if err != nil {
			return fmt.Errorf("rendering the seccomp program for %v: %w", opt.ConfigKey(), err)
		}
		rules, denyRules := Rules(opt)
		want, _, err := sentryProgram(opt, rules, denyRules).Build()
		if err != nil {
			return fmt.Errorf("building the seccomp program for %v: %w", opt.ConfigKey(), err)
		}
		if !slices.Equal(bpf.ToBytecode(got), bpf.ToBytecode(want)) {
			return fmt.Errorf("the precompiled seccomp program for %v (%d instructions) differs from the one built at runtime (%d instructions)", opt.ConfigKey(), len(got), len(want))
		}
	}
	return nil
}

// sentryProgram is the program runsc/boot/filter.Install builds when it
// finds no precompiled one.
func sentryProgram(opt Options, rules, denyRules seccomp.SyscallRules) *seccomp.Program {
	return &seccomp.Program{
		RuleSets: []seccomp.RuleSet{
			{Rules: denyRules.Copy()},
			{Rules: rules.Copy(), Action: seccomp.Allow},
		},
		Options: SeccompOptions(opt),
	}
}
