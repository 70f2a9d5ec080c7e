package tsecstorage

// What the tests read that is no part of the package's API.

// Renewals says how often the lock name was renewed since Lock took it
// (-1 when not held).
func (s *Storage) Renewals(name string) int { return s.renewals(name) }
