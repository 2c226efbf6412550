package render

import (
	"bufio"
	"cmp"
	"strings"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/publish"
)

// unreservedUsers are the users who hold g while its reservation is
// someone else's (publish.UnreservedHolders: the names compared exactly),
// as ps names them; nil for a GPU without a reservation, at no cost.
func unreservedUsers(g *cluster.GPU) []string {
	if g.Reservation == nil {
		return nil
	}
	var out []string
	for _, h := range publish.UnreservedHolders(g) {
		out = append(out, h.User)
	}
	return out
}

// usedByWords are "used by bob, carol", "(unknown)" for a user ps could
// not name; "" when users is empty. Raw text: the caller escapes it.
func usedByWords(users []string) string {
	if len(users) == 0 {
		return ""
	}
	named := make([]string, len(users))
	for i, u := range users {
		named[i] = cmp.Or(u, "(unknown)")
	}
	return "used by " + strings.Join(named, ", ")
}

// writeReservedTag writes, on a busy cell's second line, whose
// reservation its holders use when it is someone else's: the holders are
// on the line, the owner in the tag, the whole in the detail.
func writeReservedTag(w *bufio.Writer, g *cluster.GPU) {
	if len(unreservedUsers(g)) == 0 {
		return
	}
	w.WriteString(" <span class=tag>reserved: ")
	esc(w, g.Reservation.Name) // cut by package reservations
	w.WriteString("</span>")
}
