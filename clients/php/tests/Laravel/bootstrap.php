<?php
// SPDX-License-Identifier: Apache-2.0
// The package's autoloader (composer dump-autoload --dev), then Laravel:
// Debian's (Illuminate/autoload.php on the include path) or the
// vendor/autoload.php LARAVEL_AUTOLOAD names.

declare(strict_types=1);

require dirname(__DIR__, 2) . '/vendor/autoload.php';
$laravel = getenv('LARAVEL_AUTOLOAD') ?: 'Illuminate/autoload.php';
if ((@include_once $laravel) === false) {
    fwrite(STDERR, "Laravel is not installed: no $laravel (Debian: apt-get install php-laravel-framework)\n");
    exit(2);
}
