"""cluster.free_port: distinct ports that can be bound, all outside the kernel's ephemeral
range, from which an outgoing connection could take a port between the test's choice and the
worker's bind (a prefill worker once exited with "cannot listen" that way)."""

import socket
import unittest

from cluster import ephemeral_port_range, free_port


class FreePortTest(unittest.TestCase):
    def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range(self):
        low, high = ephemeral_port_range()
        ports = [free_port() for _ in range(200)]
        self.assertEqual(len(set(ports)), len(ports))
        for port in ports:
            self.assertFalse(low <= port <= high, "port %d in %d-%d" % (port, low, high))
        for port in ports[:20]:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))


if __name__ == "__main__":
    unittest.main(verbosity=2)
