// Names only (see ../README.md): ProcessGroupGloo.hpp includes this; the shim needs nothing from it.
#pragma once
