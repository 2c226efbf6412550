package history

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// UsersFromDays, the stand-in for tests that build a Summary by hand, says
// what Summary reads from a database holding the same figures: at any
// time of day, the day a window starts and today's first hour included.
func TestUsersFromDays(t *testing.T) {
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	for _, now := range []time.Time{
		day.Add(14*time.Hour + 5*time.Minute),
		day.Add(10 * time.Minute), // in today's first hour: today's not in the windows yet
		day.Add(24*time.Hour - time.Second),
	} {
		t.Run(now.Format("15:04:05"), func(t *testing.T) {
			s := openStore(t, "")
			var days []time.Time // the 30 days Summary gives, today last
			for i := 29; i >= 0; i-- {
				days = append(days, now.Truncate(24*time.Hour).Add(-time.Duration(i)*24*time.Hour))
			}
			// quarters of an hour: exact in seconds and back in hours
			figures := map[string][]float64{"alice": make([]float64, len(days)), "bob": make([]float64, len(days)),
				"carol": make([]float64, len(days)), "dave": make([]float64, len(days))}
			for i := range days {
				figures["alice"][i] = float64(1+i%5) / 4
			}
			figures["bob"][len(days)-1] = 2                                   // today only
			figures["carol"][0] = 3                                           // the oldest day only
			figures["dave"][len(days)-8], figures["dave"][len(days)-7] = 5, 7 // about the 7-day window's start
			tx, err := s.db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			for name, hs := range figures {
				for i, h := range hs {
					if h == 0 {
						continue // as the fold writes them
					}
					if _, err := tx.Exec(`INSERT INTO usage VALUES (?, ?, ?, ?)`, days[i].Unix(), kindUser, name, h*3600); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			record(t, s, &Snapshot{Time: now}) // the state Summary reads from
			sum, err := s.Summary(context.Background(), now)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(figures, sum.UserDays); diff != "" {
				t.Fatalf("Summary's days are not the figures (-figures +Summary):\n%s", diff)
			}
			byHand := &Summary{Days: sum.Days, UserDays: figures}
			if diff := cmp.Diff(sum.Users, byHand.UsersFromDays(now), cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("UsersFromDays (-Summary +UsersFromDays):\n%s", diff)
			}
		})
	}
}
