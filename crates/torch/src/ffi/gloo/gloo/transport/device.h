// Names only (see ../../README.md): held through std::shared_ptr and std::unique_ptr.
#pragma once

namespace gloo {
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo
