package config

// SourceAt is a shallow copy of c with source.addr set to addr: every function that takes the
// config and talks to "the source" then talks to that server (a candidate of source.addrs, the
// checkpoint writer), verifies its TLS name, and names it in messages. Pure.
func (c *Config) SourceAt(addr string) *Config {
	cp := *c
	cp.Source.Addr = addr
	return &cp
}
