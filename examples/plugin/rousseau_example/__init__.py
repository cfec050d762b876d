"""An example rousseau plugin package: the linechat transport and the textkit tools."""
