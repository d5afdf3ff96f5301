package main

import (
	"flag"
	"os"

	"github.com/dshgo/dsh/actors/llm"
	"github.com/dshgo/dsh/actors/llm/deepseek"
	"github.com/dshgo/dsh/actors/llm/synthetic"
)

// modelFlags choose the model a command's sessions talk to: --provider,
// --base-url, --model and --synthetic-speed (dsh run, chat and serve; dsh
// member fills them from its own flags).
type modelFlags struct {
	provider, baseURL, model string
	speed                    float64
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	def := "synthetic"
	if os.Getenv(deepseek.APIKeyEnv) != "" {
		def = "deepseek"
	}
	fs.StringVar(&m.provider, "provider", def, "model provider: synthetic or deepseek (default deepseek when "+deepseek.APIKeyEnv+" is set, else synthetic)")
	fs.StringVar(&m.baseURL, "base-url", "", "deepseek: API root (default "+deepseek.DefaultBaseURL+")")
	fs.StringVar(&m.model, "model", "", "model id (default: the provider's)")
	fs.Float64Var(&m.speed, "synthetic-speed", 0, "synthetic: tokens per second per stream (0: as fast as possible)")
}

// open builds the provider the flags name, and the model id the sessions
// record (deepseek's default model when --model is not given). cmd names
// the command in a usage error ("serve: "), or is "".
func (m modelFlags) open(cmd string) (llm.Provider, string, error) {
	switch m.provider {
	case "synthetic":
		if m.baseURL != "" {
			return nil, "", usagef("%s--base-url is for --provider deepseek", cmd)
		}
		if m.speed < 0 {
			return nil, "", usagef("%s--synthetic-speed must not be negative", cmd)
		}
		p, err := synthetic.New(synthetic.Config{Model: m.model, TextChunks: 40, TokensPerSecond: m.speed})
		if err != nil {
			return nil, "", err
		}
		return p, m.model, nil
	case "deepseek":
		p, err := deepseek.New(deepseek.Config{BaseURL: m.baseURL, Model: m.model})
		if err != nil {
			return nil, "", err
		}
		model := m.model
		if model == "" {
			model = deepseek.DefaultModel
		}
		return p, model, nil
	}
	return nil, "", usagef("%sunknown --provider %q (synthetic or deepseek)", cmd, m.provider)
}
