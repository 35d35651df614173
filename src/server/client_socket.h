// Whether an HTTP client is still there while its handler waits on the engine: the handler's
// socket found by its address (cpp-httplib does not hand it over), polled for the peer's close.
#pragma once

#include <string>

namespace hydragen::server {

// The fd of this process's TCP socket from local_port to remote_addr:remote_port, or -1.
int find_client_socket(const std::string& remote_addr, int remote_port, int local_port);

// The peer has closed its side (or the socket failed); false for fd -1.
bool peer_closed(int fd);

}  // namespace hydragen::server
