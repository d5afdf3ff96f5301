package messages

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// CallConfig selects the model for a call
// (docs/messages.md#requests-and-tool-schemas). Provider and Model
// are required; ReasoningEffort ("" = absent), Temperature and MaxTokens are
// optional. The stop list is behind WithStop/Stop so the value stays
// immutable.
type CallConfig struct {
	Provider        string
	Model           string
	ReasoningEffort string
	Temperature     OptFloat
	MaxTokens       OptInt
	stop            []string
}

// OptFloat is an optional number. The zero OptFloat is absent.
type OptFloat struct {
	v  float64
	ok bool
}

// SomeFloat returns a present OptFloat.
func SomeFloat(v float64) OptFloat { return OptFloat{v: v, ok: true} }

// Get returns the value and whether it is present.
func (o OptFloat) Get() (float64, bool) { return o.v, o.ok }

// WithStop returns a copy of c with the stop sequences set (copied).
func (c CallConfig) WithStop(stop ...string) CallConfig {
	c.stop = slices.Clone(stop)
	return c
}

// Stop returns a copy of the stop sequences, owned by the caller; nil when
// absent.
func (c CallConfig) Stop() []string { return slices.Clone(c.stop) }

// Validate checks the config: provider and model present, a finite
// temperature, a positive maxTokens.
func (c CallConfig) Validate() error {
	switch {
	case c.Provider == "" || c.Model == "":
		return fmt.Errorf("messages: call config needs a provider and a model")
	case c.Temperature.ok && (math.IsNaN(c.Temperature.v) || math.IsInf(c.Temperature.v, 0)):
		return fmt.Errorf("messages: call config temperature is not finite")
	case c.MaxTokens.ok && c.MaxTokens.v <= 0:
		return fmt.Errorf("messages: call config maxTokens %d is not positive", c.MaxTokens.v)
	}
	return nil
}

// Equal compares two configs field by field, stop sequences element by
// element (the reference's callConfigEquals).
func (c CallConfig) Equal(o CallConfig) bool {
	return c.Provider == o.Provider && c.Model == o.Model && c.ReasoningEffort == o.ReasoningEffort &&
		c.Temperature == o.Temperature && c.MaxTokens == o.MaxTokens &&
		(c.stop == nil) == (o.stop == nil) && slices.Equal(c.stop, o.stop)
}

// JSON returns the config in the harness's shape.
func (c CallConfig) JSON() JSON {
	var o ObjectBuilder
	o.String("provider", c.Provider).String("model", c.Model)
	if c.ReasoningEffort != "" {
		o.String("reasoningEffort", c.ReasoningEffort)
	}
	if v, ok := c.Temperature.Get(); ok {
		o.Float("temperature", v)
	}
	if v, ok := c.MaxTokens.Get(); ok {
		o.Int("maxTokens", v)
	}
	if c.stop != nil {
		o.Raw("stop", stringArray(c.stop))
	}
	return o.Build()
}

// ParseCallConfig reads a config object: provider and model non-empty
// strings, reasoningEffort absent or a non-empty string, temperature a
// number, maxTokens an integer, stop an array of strings.
func ParseCallConfig(j JSON) (CallConfig, error) {
	if j.Kind() != KindObject {
		return CallConfig{}, fmt.Errorf("messages: call config is not an object")
	}
	var c CallConfig
	c.Provider, _ = stringField(j, "provider")
	c.Model, _ = stringField(j, "model")
	if c.Provider == "" || c.Model == "" {
		return CallConfig{}, fmt.Errorf("messages: call config lacks provider/model")
	}
	if v, ok := j.Field("reasoningEffort"); ok {
		s, isStr := v.AsString()
		if !isStr || s == "" {
			return CallConfig{}, fmt.Errorf("messages: call config reasoningEffort is not a non-empty string")
		}
		c.ReasoningEffort = s
	}
	if v, ok := j.Field("temperature"); ok {
		f, err := parseFloat(v)
		if err != nil {
			return CallConfig{}, fmt.Errorf("messages: call config temperature: %w", err)
		}
		c.Temperature = SomeFloat(f)
	}
	if v, ok := j.Field("maxTokens"); ok {
		n, isInt := v.AsInt()
		if !isInt {
			return CallConfig{}, fmt.Errorf("messages: call config maxTokens is not an integer")
		}
		c.MaxTokens = Some(n)
	}
	if v, ok := j.Field("stop"); ok {
		if v.Kind() != KindArray {
			return CallConfig{}, fmt.Errorf("messages: call config stop is not an array")
		}
		c.stop = []string{}
		for e := range v.Elements() {
			s, isStr := e.AsString()
			if !isStr {
				return CallConfig{}, fmt.Errorf("messages: call config stop holds a non-string")
			}
			c.stop = append(c.stop, s)
		}
	}
	// A parsed config is a valid one: maxTokens 0 or -1 reads as an integer
	// but is not a config Validate accepts.
	if err := c.Validate(); err != nil {
		return CallConfig{}, err
	}
	return c, nil
}

// ToolSchema describes a tool to the model: a name, a description and a
// JSON Schema object for its parameters.
type ToolSchema struct {
	Name        string
	Description string
	Parameters  JSON
}

// JSON returns the schema in the harness's shape.
func (t ToolSchema) JSON() JSON {
	var o ObjectBuilder
	params := t.Parameters
	if params.IsZero() {
		params = JSON{text: "{}"}
	}
	return o.String("name", t.Name).String("description", t.Description).Raw("parameters", params).Build()
}

// ParseToolSchema reads a tool schema object.
func ParseToolSchema(j JSON) (ToolSchema, error) {
	var t ToolSchema
	var ok bool
	if t.Name, ok = stringField(j, "name"); !ok || t.Name == "" {
		return ToolSchema{}, fmt.Errorf("messages: tool schema lacks a name")
	}
	if v, ok := j.Field("description"); ok {
		if t.Description, ok = v.AsString(); !ok {
			return ToolSchema{}, fmt.Errorf("messages: tool schema %s description is not a string", t.Name)
		}
	}
	if t.Parameters, ok = j.Field("parameters"); ok && t.Parameters.Kind() != KindObject {
		return ToolSchema{}, fmt.Errorf("messages: tool schema %s parameters is not an object", t.Name)
	}
	return t, nil
}

func parseFloat(v JSON) (float64, error) {
	if v.Kind() != KindNumber {
		return 0, fmt.Errorf("not a number")
	}
	return strconv.ParseFloat(v.text, 64)
}
