/*
 * Licence line 0: permission is hereby granted, free of charge.
 * Licence line 1: permission is hereby granted, free of charge.
 * Licence line 2: permission is hereby granted, free of charge.
 * Licence line 3: permission is hereby granted, free of charge.
 * Licence line 4: permission is hereby granted, free of charge.
 * Licence line 5: permission is hereby granted, free of charge.
 * Licence line 6: permission is hereby granted, free of charge.
 * Licence line 7: permission is hereby granted, free of charge.
 * Licence line 8: permission is hereby granted, free of charge.
 * Licence line 9: permission is hereby granted, free of charge.
 * Licence line 10: permission is hereby granted, free of charge.
 * Licence line 11: permission is hereby granted, free of charge.
 */
#include <stddef.h>
int x;
