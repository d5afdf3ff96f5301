package main

import (
	"fmt"
	"io"
	"strings"
)

// completionShells are the shells dsh completion writes a script for.
var completionShells = []string{"bash", "zsh", "fish"}

const completionUsage = `Usage: dsh completion bash|zsh|fish

Prints a script that completes dsh's commands, subcommands and flags in
the shell named. To use it:

  bash  source <(dsh completion bash)   (in ~/.bashrc), or save it as
        ~/.local/share/bash-completion/completions/dsh
  zsh   dsh completion zsh > "${fpath[1]}/_dsh"   (then compinit), or
        source <(dsh completion zsh) after compinit in ~/.zshrc
  fish  dsh completion fish > ~/.config/fish/completions/dsh.fish

Where no command or flag fits (a FILE argument), the shell completes file
names.
`

// completionCmd is `dsh completion SHELL`.
func completionCmd(args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("completion")
	if err := parseFlags(fs, args, completionUsage, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("completion: want one shell (%s)", strings.Join(completionShells, ", "))
	}
	nodes := completionNodes()
	var script string
	switch fs.Arg(0) {
	case "bash":
		script = bashCompletion(nodes)
	case "zsh":
		script = zshCompletion(nodes)
	case "fish":
		script = fishCompletion(nodes)
	default:
		return usagef("completion: unknown shell %q (%s)", fs.Arg(0), strings.Join(completionShells, ", "))
	}
	_, err := io.WriteString(stdout, script)
	return err
}

// completionNode is what a script completes after one command path: key
// is the path joined with slashes ("dsh/log/verify"), words the
// subcommands or arguments it offers, flags its flags.
type completionNode struct {
	key          string
	words, flags []string
}

// completionNodes walks the command table: the root, every group and
// every command, in the table's order.
func completionNodes() []completionNode {
	cs := commands()
	var top []string
	for _, c := range cs {
		top = append(top, c.name)
	}
	nodes := []completionNode{{key: "dsh", words: top, flags: []string{"--help", "--version"}}}
	var walk func(key string, cs []*command)
	walk = func(key string, cs []*command) {
		for _, c := range cs {
			n := completionNode{key: key + "/" + c.name, words: c.words}
			switch {
			case c.run == nil:
				for _, s := range c.subs {
					n.words = append(n.words, s.name)
				}
				n.flags = []string{"--help"}
			case c.name == "help" && key == "dsh":
				n.words = top
				n.flags = []string{"--help"}
			default:
				n.flags = flagNames(c.run)
			}
			nodes = append(nodes, n)
			walk(n.key, c.subs)
		}
	}
	walk("dsh", cs)
	return nodes
}

// keys is the case pattern that matches every command path but the root's.
func keys(nodes []completionNode) string {
	var ks []string
	for _, n := range nodes[1:] {
		ks = append(ks, n.key)
	}
	return strings.Join(ks, "|")
}

// choose writes the rest of an "if the word is a flag" of bash or zsh:
// a case on the command path setting cands to its flags, else one setting
// it to its subcommands. open starts a case pattern ("" in bash, "(" in
// zsh); assign is the assignment, with %s for the candidates.
func choose(b *strings.Builder, nodes []completionNode, open, assign string) {
	arms := func(pick func(completionNode) []string) {
		b.WriteString("\t\tcase $key in\n")
		for _, n := range nodes {
			if l := pick(n); len(l) > 0 {
				fmt.Fprintf(b, "\t\t%s%s) %s ;;\n", open, n.key, fmt.Sprintf(assign, strings.Join(l, " ")))
			}
		}
		b.WriteString("\t\tesac\n")
	}
	arms(func(n completionNode) []string { return n.flags })
	b.WriteString("\telse\n")
	arms(func(n completionNode) []string { return n.words })
	b.WriteString("\tfi\n")
}

// bashCompletion is the bash script: _dsh walks the words typed so far
// down the command table (skipping flags, stopping at the first argument
// that is no command) and offers the flags or the subcommands there.
func bashCompletion(nodes []completionNode) string {
	var b strings.Builder
	b.WriteString(`# bash completion for dsh, written by 'dsh completion bash'.
_dsh() {
	local cur=${COMP_WORDS[COMP_CWORD]} key=dsh w i cands=
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		[[ $w == -* ]] && continue
		case "$key/$w" in
		` + keys(nodes) + `) key="$key/$w" ;;
		*) break ;;
		esac
	done
	if [[ $cur == -* ]]; then
`)
	choose(&b, nodes, "", "cands=%q")
	b.WriteString(`	COMPREPLY=($(compgen -W "$cands" -- "$cur"))
}
complete -o default -F _dsh dsh
`)
	return b.String()
}

// zshCompletion is the zsh script, the same walk as bash's; with no
// command or flag to offer it completes file names.
func zshCompletion(nodes []completionNode) string {
	var b strings.Builder
	b.WriteString(`#compdef dsh
# zsh completion for dsh, written by 'dsh completion zsh'.
_dsh() {
	local key=dsh w i
	local -a cands
	for ((i = 2; i < CURRENT; i++)); do
		w=${words[i]}
		[[ $w == -* ]] && continue
		case "$key/$w" in
		(` + keys(nodes) + `) key="$key/$w" ;;
		(*) break ;;
		esac
	done
	if [[ ${words[CURRENT]} == -* ]]; then
`)
	choose(&b, nodes, "(", "cands=(%s)")
	b.WriteString(`	if (( ${#cands} )); then
		compadd -a cands
	else
		_files
	fi
}
if [[ ${funcstack[1]} == _dsh ]]; then
	_dsh "$@"
else
	compdef _dsh dsh
fi
`)
	return b.String()
}

// fishCompletion is the fish script: __dsh_key is the same walk, and each
// command path gets its flags (long options) and its subcommands.
func fishCompletion(nodes []completionNode) string {
	var b strings.Builder
	b.WriteString(`# fish completion for dsh, written by 'dsh completion fish'.
function __dsh_key
	set -l key dsh
	set -l typed (commandline -opc)
	for w in $typed[2..-1]
		string match -q -- '-*' $w; and continue
		switch "$key/$w"
			case ` + strings.ReplaceAll(keys(nodes), "|", " ") + `
				set key "$key/$w"
			case '*'
				break
		end
	end
	echo $key
end
`)
	for _, n := range nodes {
		cond := fmt.Sprintf("'test (__dsh_key) = %s'", n.key)
		if len(n.words) > 0 {
			fmt.Fprintf(&b, "complete -c dsh -n %s -f -a '%s'\n", cond, strings.Join(n.words, " "))
		}
		if len(n.flags) > 0 {
			var ls []string
			for _, f := range n.flags {
				ls = append(ls, "-l "+strings.TrimPrefix(f, "--"))
			}
			fmt.Fprintf(&b, "complete -c dsh -n %s %s\n", cond, strings.Join(ls, " "))
		}
	}
	return b.String()
}
