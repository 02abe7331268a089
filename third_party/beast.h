// Boost.Asio and Boost.Beast, included the one way that compiles with gcc 12 in C++20 mode:
// Asio's awaitable.hpp uses std::exchange without including <utility>.
#pragma once

#include <utility>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
