package history

import (
	"database/sql"
	"strings"
)

// spellsKeyed is how the spells table's key ends since spells are per
// holder: two holders of one GPU can start their spells at the same
// snapshot. Tables made before were keyed by (host, gpu, start), which
// would keep one of the two, and had no gpu_seconds (a holder's share of
// the GPU over the spell): their rows keep it NULL, and count as before.
const spellsKeyed = "PRIMARY KEY (host, gpu, start, users)"

// upgradeSpells rekeys a spells table made before spells were per holder,
// keeping its rows. A database made since needs nothing, and is only read:
// taking the write lock would make every render wait for a long import.
func (s *Store) upgradeSpells() error {
	if ok, err := spellsUpToDate(s.rdb.QueryRow); err != nil || ok {
		return err
	}
	tx, err := s.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// again under the write lock: another render may have done it
	if ok, err := spellsUpToDate(tx.QueryRow); err != nil || ok {
		return err
	}
	for _, q := range []string{
		`CREATE TABLE spells_new (
			host TEXT NOT NULL, gpu TEXT NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL,
			users TEXT NOT NULL, mem_mib REAL NOT NULL, ended_at INTEGER NOT NULL,
			gpu_seconds REAL, account TEXT, job TEXT, model TEXT, counted INTEGER,
			` + spellsKeyed + `
		) WITHOUT ROWID`,
		`INSERT INTO spells_new (host, gpu, start, "end", users, mem_mib, ended_at)
			SELECT host, gpu, start, "end", users, mem_mib, ended_at FROM spells`,
		`DROP TABLE spells`,
		`ALTER TABLE spells_new RENAME TO spells`,
		`CREATE INDEX IF NOT EXISTS spells_end ON spells ("end")`,
	} {
		if _, err := tx.Exec(q); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func spellsUpToDate(queryRow func(string, ...any) *sql.Row) (bool, error) {
	var ddl string
	if err := queryRow(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'spells'`).Scan(&ddl); err != nil {
		return false, err
	}
	return strings.Contains(ddl, spellsKeyed), nil
}
