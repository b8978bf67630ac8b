package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// nearCommand returns the name of a command of parent that word is one
// typing slip away from (one letter wrong, missing, extra, or two letters
// swapped, in any case), or "". It is stricter than cobra's suggestions,
// which are two edits away and would take task-1 for tasks.
func nearCommand(parent *cobra.Command, word string) string {
	w := strings.ToLower(word)
	if len(w) < 2 {
		return ""
	}
	for _, c := range parent.Commands() {
		if !c.IsAvailableCommand() && c.Name() != "help" {
			continue
		}
		for _, name := range append([]string{c.Name()}, c.Aliases...) {
			if osaDistance(w, name) <= 1 {
				return c.Name()
			}
		}
	}
	return ""
}

// unknownCommand is the usage error for a word that is not a command of
// parent.
func unknownCommand(parent *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, parent.CommandPath())
	if near := nearCommand(parent, word); near != "" {
		msg += fmt.Sprintf(": did you mean %s?", near)
	}
	return &usageError{msg + fmt.Sprintf(" (see %s --help)", parent.CommandPath())}
}

// unknownShell is the usage error for a word that is not a shell of
// the completion command: it names the shells, or the one it is a slip of.
func unknownShell(completion *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown shell %q for %s", word, completion.CommandPath())
	if near := nearCommand(completion, word); near != "" {
		msg += fmt.Sprintf(": did you mean %s?", near)
	} else {
		var shells []string
		for _, c := range completion.Commands() {
			if c.IsAvailableCommand() {
				shells = append(shells, c.Name())
			}
		}
		msg += ": want " + orList(shells)
	}
	return &usageError{msg + fmt.Sprintf(" (see %s --help)", completion.CommandPath())}
}

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// osaDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent letters.
func osaDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
