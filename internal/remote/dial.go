package remote

import (
	"context"
	"fmt"
	"net"

	"github.com/gpumon/gpumon/internal/hoststatus"
)

// dial connects to t as ssh would: through its ProxyJump hops, through its
// ProxyCommand, or straight over TCP. route says which, for the messages of
// the phases that follow (" through bastion"); "" for a direct connection.
// A failure is already an *Error.
func (c *Client) dial(ctx context.Context, t Target) (conn net.Conn, route string, err error) {
	switch {
	case len(t.ProxyJump) > 0:
		jc, err := c.jumpClient(ctx, t.ProxyJump)
		if err != nil {
			return nil, "", err
		}
		route = " through " + t.ProxyJump[len(t.ProxyJump)-1]
		conn, err = jc.DialContext(ctx, "tcp", t.Addr())
		if err != nil {
			return nil, route, c.classify(ctx, "connecting to "+t.Addr()+route, err, t)
		}
		return conn, route, nil
	case t.ProxyCommand != "":
		route = " through " + proxyProgram(t.ProxyCommand)
		conn, err := c.dialProxyCommand(t, fmt.Sprintf("no answer within %s (while SSH handshake with %s%s)", c.timeoutText(), t.Addr(), route))
		return conn, route, err
	default:
		conn, err := dialTCP(ctx, t)
		if err != nil {
			return nil, "", c.classify(ctx, "connecting to "+t.Addr(), err, t)
		}
		return conn, "", nil
	}
}

// dialHop connects to the first jump host of a ProxyJump chain: directly or
// through its own ProxyCommand, as ssh would.
func (c *Client) dialHop(ctx context.Context, t Target) (net.Conn, error) {
	switch {
	case len(t.ProxyJump) > 0:
		return nil, &Error{Status: hoststatus.Error, Msg: fmt.Sprintf("jump host %s has a ProxyJump of its own, which fetch does not follow: list every hop, first to last, in the target's ProxyJump", t.Alias)}
	case t.ProxyCommand != "":
		return c.dialProxyCommand(t, fmt.Sprintf("no answer within %s (while SSH handshake with %s through %s)", jumpTimeout, t.Addr(), proxyProgram(t.ProxyCommand)))
	}
	return dialTCP(ctx, t)
}

// dialProxyCommand starts t's ProxyCommand. It is not bound to a context:
// the caller's deadline closes the connection, and closing it kills the
// command, which lives as long as the connection (a jump host's, shared by
// a whole run, outlives the deadline it was dialed under). onDeadline is
// the host's message should the deadline cut the proxy short.
func (c *Client) dialProxyCommand(t Target, onDeadline string) (net.Conn, error) {
	conn, err := startProxyCommand(expandProxyCommand(t))
	if err != nil {
		return nil, &Error{Status: hoststatus.Error, Msg: err.Error()}
	}
	conn.deadlineMsg = onDeadline
	return conn, nil
}

func dialTCP(ctx context.Context, t Target) (net.Conn, error) {
	network := "tcp"
	switch t.AddressFamily {
	case "inet":
		network = "tcp4"
	case "inet6":
		network = "tcp6"
	}
	var d net.Dialer
	return d.DialContext(ctx, network, t.Addr())
}
