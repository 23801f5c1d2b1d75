//! Charts drawn with plotters, to PNG and SVG, with a font embedded in the binary. (To be filled in.)
