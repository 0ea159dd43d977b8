/** This release of llamadock; a test keeps it equal to package.json's `version`. */
export const VERSION = "0.1.0";
