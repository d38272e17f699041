/** The SDK's version: Lizard's own (internal/version/VERSION; a Go test keeps them equal, and package.json's). */
export const VERSION = '0.1.0';
